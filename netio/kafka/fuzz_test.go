package kafka

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/securitytest"
	"github.com/ringlog/ringlog/ring"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzServeFrame feeds frames of random key, version and body through the request path a
// connection's reader takes (the frame limits, dispatch, the real broker core, response
// encoding) and checks that nothing panics, that every request is answered or closes the
// connection, and that decoding stays within decodedBytesPerFrameByteMax. Each frame runs
// twice: on a broker without ACLs and quotas, and on one with both (fuzzACLs), where most
// requests are refused in part or whole and every reply is charged and throttled.
//
// Seeds: testdata/fuzz/FuzzServeFrame, regenerated from fuzzFrameSeeds with
// RINGLOG_WRITE_FUZZ_SEEDS=1 go test -run TestWriteKafkaFuzzSeeds ./netio/kafka.
func FuzzServeFrame(f *testing.F) {
	for _, s := range fuzzFrameSeeds(f) {
		f.Add(s.key, s.version, s.body)
	}
	srv, guarded := fuzzServer(f, nil), fuzzServer(f, fuzzACLs)
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		frame := binary.BigEndian.AppendUint16(nil, uint16(key))
		frame = binary.BigEndian.AppendUint16(frame, uint16(version))
		frame = append(frame, 0, 0, 0, 7)
		frame = append(frame, body...)
		if len(frame) < requestHeaderFixedBytes+2 || key != keyProduce && len(frame) > adminFrameBytesMax {
			return // the reader closes the connection before the frame is read
		}
		checkDecodeBound(t, key, version, frame)
		if waitsLong(frame) {
			return
		}
		again := append([]byte(nil), frame...) // records alias the frame until answered
		serveOne(t, srv, frame)
		serveOne(t, guarded, again)
	})
}

// fuzzACLs turns on ACLs (User:ANONYMOUS may do anything on topic "fuzz" and groups
// "a...", may not write topics "fuzz-...", nothing else) and quotas low enough that every
// reply past the first few is throttled.
func fuzzACLs(f *testing.F, sec *netio.Security) {
	az, err := security.OpenAuthorizer(f.TempDir(), true, nil)
	if err != nil {
		f.Fatal(err)
	}
	if err := az.Add([]security.ACL{
		{Resource: security.ResourceTopic, Name: "fuzz", Pattern: security.PatternLiteral, Principal: security.Anonymous, Operation: security.OpAll, Permission: security.Allow},
		{Resource: security.ResourceTopic, Name: "fuzz-", Pattern: security.PatternPrefixed, Principal: security.Anonymous, Operation: security.OpWrite, Permission: security.Deny},
		{Resource: security.ResourceGroup, Name: "a", Pattern: security.PatternPrefixed, Principal: security.Anonymous, Operation: security.OpAll, Permission: security.Allow},
	}); err != nil {
		f.Fatal(err)
	}
	sec.Authorizer = az
	sec.Quotas = security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{ProduceBytesPerSec: 1024, FetchBytesPerSec: 1024, RequestsPerSec: 10},
		Burst: time.Millisecond})
}

// checkDecodeBound decodes frame as dispatch does and checks what it allocated.
func checkDecodeBound(t *testing.T, key, version int16, frame []byte) {
	req := kmsg.RequestForKey(key)
	if req == nil || version < 0 || version > req.MaxVersion() {
		return
	}
	h, _ := parseFixedHeader(frame)
	// 64 KiB: the request struct itself and other goroutines' allocations meanwhile.
	limit := uint64(decodedBytesPerFrameByteMax*len(frame)) + 64<<10
	// TotalAlloc is process-wide: the fuzz brokers' shard goroutines may still be working on
	// earlier inputs and be counted too (a 35-byte Metadata v0 frame once "allocated" 25 MB and
	// passed on replay). A decoder that really amplifies does so every time, so the frame fails
	// only when all three decodes breach.
	var allocated uint64
	for i := range 3 {
		if i > 0 {
			req = kmsg.RequestForKey(key) // a fresh request: the first decode filled this one
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		decodeRequest(&h, req, frame)
		runtime.ReadMemStats(&after)
		if allocated = after.TotalAlloc - before.TotalAlloc; allocated <= limit {
			return
		}
	}
	t.Fatalf("%s v%d: decoding a %d-byte frame allocated %d bytes (each of 3 times), more than %d", kmsg.NameForKey(key), version, len(frame), allocated, limit)
}

// serveOne dispatches frame on a connection that is never read from a socket and encodes
// the answer as the writer would; closed reports that the connection closes after it.
func serveOne(t *testing.T, srv *fuzzBroker, frame []byte) (closed bool) {
	h, _ := parseFixedHeader(frame)
	p := &pending{c: srv.conn, hdr: h, body: frame, done: make(chan struct{})}
	srv.s.dispatch(p)
	select {
	case <-p.done:
	case <-time.After(time.Minute): // a long-poll fetch waits at most 30 s
		t.Fatalf("%s v%d: no answer within a minute", kmsg.NameForKey(h.key), h.version)
	}
	if p.resp != nil || p.frame != nil {
		out, splices := p.appendResponse(nil, nil)
		size := int64(len(out) - 4)
		for _, sp := range splices {
			size += sp.Len()
		}
		if int64(binary.BigEndian.Uint32(out)) != size || int32(binary.BigEndian.Uint32(out[4:])) != h.correlationID {
			t.Fatalf("%s v%d: response frame mis-sized or with the wrong correlation id", kmsg.NameForKey(h.key), h.version)
		}
	} else if !p.fatal && !(h.key == keyProduce && isAcksZero(frame)) {
		t.Fatalf("%s v%d: neither a response nor a closed connection", kmsg.NameForKey(h.key), h.version)
	}
	if p.release != nil {
		p.release()
	}
	return p.fatal
}

// waitsLong reports a JoinGroup whose answer may take more than a second by design: a
// second member of a group waits for the first to rejoin for up to the first's rebalance
// timeout (v0: its session timeout). The harness only checks how such frames decode.
func waitsLong(frame []byte) bool {
	h, _ := parseFixedHeader(frame)
	if h.key != keyJoinGroup {
		return false
	}
	req := kmsg.NewPtrJoinGroupRequest()
	if decodeRequest(&h, req, frame) != nil {
		return false
	}
	return req.RebalanceTimeoutMillis > 1000 || req.SessionTimeoutMillis > 1000
}

func isAcksZero(frame []byte) bool {
	h, _ := parseFixedHeader(frame)
	req := kmsg.NewPtrProduceRequest()
	return decodeRequest(&h, req, frame) == nil && req.Acks == 0
}

type fuzzBroker struct {
	s    *Server
	conn *conn
}

// fuzzServer opens a broker (one shard, a topic "fuzz" of 2 partitions) for the fuzz
// target; it closes with the target.
// tune, if set, adds to the listener's security (FuzzServeFrame's ACLs and quotas).
func fuzzServer(f *testing.F, tune func(*testing.F, *netio.Security)) *fuzzBroker {
	// Short group sessions: a member a seed leaves behind is gone before a later seed's
	// member of the same group would wait for it to rejoin (each seed runs twice: as f.Add
	// and from testdata).
	core, err := shard.Open(shard.Config{DataDir: f.TempDir(), Shards: 1, Ring: ring.Config{Backend: "auto"}, ScrubBytesPerSecond: -1,
		Groups: shard.GroupsConfig{SessionTimeoutMin: 10 * time.Millisecond, SessionTimeoutMax: time.Second}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { core.Close() })
	if err := core.CreateTopic("fuzz", 2, nil); err != nil {
		f.Fatal(err)
	}
	limits := netio.NewServer(netio.HandlerFunc(func(*netio.Request) {}), netio.Config{Shards: 1})
	sec := &netio.Security{Credentials: fuzzCredentials(f)}
	if tune != nil {
		tune(f, sec)
	}
	s, err := NewServer(core, "127.0.0.1:9092", Config{Limits: limits, AutoCreateTopics: true, Security: sec})
	if err != nil {
		f.Fatal(err)
	}
	adm, err := limits.Admit("127.0.0.1:1")
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzBroker{s: s, conn: &conn{s: s, adm: adm, remote: "fuzz", quit: make(chan struct{})}}
}

// fuzzCredentials is a store with user "fuzz" (password "fuzz", both mechanisms).
func fuzzCredentials(f *testing.F) *security.Credentials {
	creds, err := security.OpenCredentials(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	securitytest.AddUser(f, creds, "fuzz", "fuzz")
	return creds
}

// FuzzKafkaSASL runs a whole SASL exchange on a fresh connection — SaslHandshake naming
// mechanism, SaslAuthenticate with first, then with final — through dispatch, and checks
// that every step is answered or closes the connection, and that a connection logs in only
// after an exchange the mechanism accepted (never with a random final message).
// Seeds: testdata/fuzz/FuzzKafkaSASL.
func FuzzKafkaSASL(f *testing.F) {
	f.Add("SCRAM-SHA-256", []byte("n,,n=fuzz,r=fyko+d2lbbFgONRv9qkxdawL"), []byte("c=biws,r=fyko+d2lbbFgONRv9qkxdawL,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	f.Add("SCRAM-SHA-512", []byte("n,,n=nobody,r=x"), []byte(""))
	srv := fuzzServer(f, nil)
	f.Fuzz(func(t *testing.T, mechanism string, first, final []byte) {
		c := &conn{s: srv.s, adm: srv.conn.adm, remote: "fuzz", quit: make(chan struct{})}
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, mechanism
		first1 := kmsg.NewPtrSASLAuthenticateRequest()
		first1.Version, first1.SASLAuthBytes = 2, first
		final1 := kmsg.NewPtrSASLAuthenticateRequest()
		final1.Version, final1.SASLAuthBytes = 2, final
		for _, req := range []kmsg.Request{hs, first1, final1} {
			b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
			b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
			b = append(b, 0, 0, 0, 7, 0, 4, 'f', 'u', 'z', 'z')
			if req.IsFlexible() {
				b = append(b, 0)
			}
			fuzz := &fuzzBroker{s: srv.s, conn: c}
			if closed := serveOne(t, fuzz, req.AppendTo(b)); closed {
				break
			}
		}
		if c.sess.principal != "" {
			t.Fatalf("logged in as %s by a random final message %q", c.sess.principal, final)
		}
	})
}

type frameSeed struct {
	name         string
	key, version int16
	body         []byte
}

// fuzzFrameSeeds are valid requests of every served API at their lowest and highest
// versions, then edge cases: unserved and unknown keys and versions, empty and cut bodies,
// array lengths far beyond the bytes, and a valid produce (so fetches find records).
func fuzzFrameSeeds(tb testing.TB) []frameSeed {
	header := func(req kmsg.Request) []byte {
		b := binary.BigEndian.AppendUint16(nil, 4)
		b = append(b, "fuzz"...)
		if req.IsFlexible() {
			b = append(b, 0)
		}
		return req.AppendTo(b)
	}
	var seeds []frameSeed
	add := func(name string, req kmsg.Request, version int16) {
		req.SetVersion(version)
		seeds = append(seeds, frameSeed{name, req.Key(), version, header(req)})
	}
	b := batch.NewBuilder(batch.BuilderOptions{Codec: batch.CodecSnappy})
	b.Append(1, []byte("k"), []byte("v"), nil)
	records, err := b.Build(nil)
	if err != nil {
		tb.Fatal(err)
	}
	for _, key := range servedKeys() {
		a := served[key]
		for _, v := range []int16{a.min, a.max} {
			switch a.key {
			case keyProduce:
				req := kmsg.NewPtrProduceRequest()
				req.Acks = 1
				req.Topics = []kmsg.ProduceRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: records}}}}
				add("produce", req, v)
			case keyFetch:
				req := kmsg.NewPtrFetchRequest()
				req.MaxWaitMillis, req.MaxBytes = 10, 1<<20
				req.Topics = []kmsg.FetchRequestTopic{{Topic: "fuzz", Partitions: []kmsg.FetchRequestTopicPartition{{Partition: 0, PartitionMaxBytes: 1 << 20}, {Partition: 9}}}}
				add("fetch", req, v)
			case keyListOffsets:
				req := kmsg.NewPtrListOffsetsRequest()
				req.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 1, Timestamp: -2}, {Partition: 0, Timestamp: 0}}}}
				add("list offsets", req, v)
			case keyMetadata:
				req := kmsg.NewPtrMetadataRequest()
				req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("fuzz")}, {Topic: kmsg.StringPtr("fuzz-auto")}}
				req.AllowAutoTopicCreation = true
				add("metadata", req, v)
			case keyCreateTopics:
				req := kmsg.NewPtrCreateTopicsRequest()
				req.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "fuzz-created", NumPartitions: 1, ReplicationFactor: -1}}
				add("create topics", req, v)
			case keyDeleteTopics:
				req := kmsg.NewPtrDeleteTopicsRequest()
				req.TopicNames = []string{"fuzz-created"}
				add("delete topics", req, v)
			case keyCreatePartitions:
				req := kmsg.NewPtrCreatePartitionsRequest()
				req.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "fuzz", Count: 3}}
				add("create partitions", req, v)
			case keyDescribeConfigs:
				req := kmsg.NewPtrDescribeConfigsRequest()
				req.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "fuzz"}}
				add("describe configs", req, v)
			case keyInitProducerID:
				add("init producer id", kmsg.NewPtrInitProducerIDRequest(), v)
			case keySaslHandshake:
				req := kmsg.NewPtrSASLHandshakeRequest()
				req.Mechanism = "SCRAM-SHA-256"
				add("sasl handshake", req, v)
			case keySaslAuthenticate:
				req := kmsg.NewPtrSASLAuthenticateRequest()
				req.SASLAuthBytes = []byte("n,,n=fuzz,r=fyko+d2lbbFgONRv9qkxdawL")
				add("sasl authenticate", req, v)
			case keyApiVersions:
				add("api versions", kmsg.NewPtrApiVersionsRequest(), v)
			case keyOffsetCommit:
				req := kmsg.NewPtrOffsetCommitRequest()
				req.Group, req.Generation = "fuzz-group", -1
				req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "fuzz", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
				add("offset commit", req, v)
			case keyOffsetFetch:
				req := kmsg.NewPtrOffsetFetchRequest()
				req.Group = "fuzz-group"
				add("offset fetch", req, v)
			case keyJoinGroup:
				req := kmsg.NewPtrJoinGroupRequest()
				// A group of its own per version, short timeouts: a second member in one group
				// waits for the first to rejoin, up to its rebalance timeout.
				req.Group, req.ProtocolType, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = fmt.Sprintf("fuzz-join-%d", v), "consumer", 20, 20
				req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 1, 0, 4, 'f', 'u', 'z', 'z', 0, 0, 0, 0}}}
				add("join group", req, v)
			default: // the other group APIs: empty requests name an invalid group
				add(kmsg.NameForKey(a.key), kmsg.RequestForKey(a.key), v)
			}
		}
	}
	hugeArray := append(binary.BigEndian.AppendUint16(nil, 0), 0x7f, 0xff, 0xff, 0xff)
	seeds = append(seeds,
		frameSeed{"api versions v99", keyApiVersions, 99, nil},
		frameSeed{"join group (not served)", 11, 5, header(&kmsg.JoinGroupRequest{Version: 5, Group: "g", ProtocolType: "consumer"})},
		frameSeed{"unknown key", 30000, 0, nil},
		frameSeed{"negative version", keyMetadata, -1, nil},
		frameSeed{"empty body", keyMetadata, 1, nil},
		frameSeed{"client id longer than frame", keyMetadata, 1, []byte{0x7f, 0xff}},
		frameSeed{"metadata with 2^31 topics", keyMetadata, 1, hugeArray},
		frameSeed{"flexible header, bad tags", keyMetadata, 9, []byte{0, 0, 0xff, 0xff, 0xff}},
		frameSeed{"produce acks 0", keyProduce, 3, header(&kmsg.ProduceRequest{Version: 3, Acks: 0, Topics: []kmsg.ProduceRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 1, Records: records}}}}})},
		frameSeed{"produce garbage records", keyProduce, 7, header(&kmsg.ProduceRequest{Version: 7, Acks: -1, Topics: []kmsg.ProduceRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: []byte("not a batch")}}}}})},
	)
	return seeds
}

// TestWriteKafkaFuzzSeeds writes testdata/fuzz/FuzzServeFrame from fuzzFrameSeeds with
// RINGLOG_WRITE_FUZZ_SEEDS=1; otherwise it checks that every seed file exists.
func TestWriteKafkaFuzzSeeds(t *testing.T) {
	for i, s := range fuzzFrameSeeds(t) {
		path := filepath.Join("testdata", "fuzz", "FuzzServeFrame", fmt.Sprintf("seed-%02d", i))
		content := fmt.Sprintf("go test fuzz v1\nint16(%d)\nint16(%d)\n[]byte(%s)\n", s.key, s.version, strconv.Quote(string(s.body)))
		if os.Getenv("RINGLOG_WRITE_FUZZ_SEEDS") == "1" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("committed fuzz seed %q missing (run with RINGLOG_WRITE_FUZZ_SEEDS=1): %v", s.name, err)
		}
	}
}
