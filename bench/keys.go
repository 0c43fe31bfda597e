package bench

import (
	"encoding/binary"
	"math/rand/v2"
)

// keySpaceSize is how many distinct keys the random distribution draws from.
const keySpaceSize = 1 << 20

// hotKey is the one key that the hot distribution sends HotKeyShare of messages with.
var hotKey = []byte("hot-key-00000000")

// keyChooser picks each message's key and partition. Keys map to partitions by FNV-1a
// mod the partition count (the client's partitioner is the driver's business; the framework
// only needs a stable mapping so that a hot key lands on one partition). Null keys go to
// partition -1 (none, when the client places them: clientPlaces), round-robin (roundrobin,
// and none when the client cannot place them), or stick to one partition for
// stickyBatchBytes (sticky). One chooser per producer goroutine.
type keyChooser struct {
	distribution string
	clientPlaces bool
	hotShare     float64
	partitions   int
	next         int
	stickyRun    int // sticky: messages per partition before moving on
	stickyLeft   int // sticky: messages left on partition next
	rng          *rand.Rand
	key          [16]byte
}

// stickyBatchBytes is how much the sticky distribution sends to one partition before it
// moves on: Kafka's default batch.size (16 KiB), the amount after which its uniform sticky
// partitioner (KIP-794) switches partitions.
const stickyBatchBytes = 16 << 10

// newKeyChooser returns a chooser for w; clientPlaces says the driver's client places null
// keys (see NullKeyPlacer).
func newKeyChooser(w Workload, seed uint64, clientPlaces bool) *keyChooser {
	return &keyChooser{
		distribution: w.KeyDistribution,
		clientPlaces: clientPlaces && w.KeyDistribution == KeysNone,
		hotShare:     w.HotKeyShare,
		partitions:   w.PartitionsPerTopic,
		next:         int(seed % uint64(w.PartitionsPerTopic)),
		stickyRun:    max(1, (stickyBatchBytes+int(w.MessageSize)-1)/max(int(w.MessageSize), 1)),
		rng:          rand.New(rand.NewPCG(seed, 0x6b657973)),
	}
}

// choose returns the partition and key (nil for none). The key slice is reused by the next call.
func (k *keyChooser) choose() (int, []byte) {
	switch k.distribution {
	case KeysRandom:
		return k.forKey(k.randomKey())
	case KeysHot:
		if k.rng.Float64() < k.hotShare {
			return k.forKey(hotKey)
		}
		return k.forKey(k.randomKey())
	case KeysSticky:
		if k.stickyLeft == 0 {
			k.stickyLeft = k.stickyRun
			if k.partitions > 1 { // a random partition other than the last one
				k.next = (k.next + 1 + k.rng.IntN(k.partitions-1)) % k.partitions
			}
		}
		k.stickyLeft--
		return k.next, nil
	default:
		if k.clientPlaces {
			return -1, nil
		}
		p := k.next
		k.next = (k.next + 1) % k.partitions
		return p, nil
	}
}

func (k *keyChooser) randomKey() []byte {
	copy(k.key[:], "key-")
	binary.BigEndian.PutUint64(k.key[8:], k.rng.Uint64N(keySpaceSize))
	return k.key[:]
}

func (k *keyChooser) forKey(key []byte) (int, []byte) {
	return int(fnv1a(key) % uint32(k.partitions)), key
}

func fnv1a(data []byte) uint32 {
	hash := uint32(2166136261)
	for _, b := range data {
		hash ^= uint32(b)
		hash *= 16777619
	}
	return hash
}
