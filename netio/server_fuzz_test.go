package netio_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/ringlog/ringlog/netio/wire"

	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/netio/fakebroker"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
)

// FuzzServerStream writes arbitrary bytes to a live server (net driver, fakebroker fixture)
// and checks that the server answers and closes (after the client half-closes) without
// crashing, and still serves a well-formed client afterwards.
func FuzzServerStream(f *testing.F) {
	fuzzServerStream(f, nil, []wire.Message{
		&wire.APIVersionsRequest{ClientID: "fuzz"},
		&wire.CreateTopicsRequest{Topics: []wire.CreateTopic{{Topic: "t", Partitions: 2, ReplicationFactor: 1}}},
		&wire.MetadataRequest{},
		&wire.FetchRequest{Topics: []wire.FetchTopic{{Topic: "t", Partitions: []wire.FetchPartition{{Partition: 0, MaxBytes: 1 << 20}}}}},
		&wire.ProduceRequest{Acks: wire.AcksLeader, Topics: []wire.ProduceTopic{{Topic: "t", Partitions: []wire.ProducePartition{{Partition: 1, Records: []byte("not a batch")}}}}},
	})
}

// FuzzSecureServerStream is FuzzServerStream against a server that requires SCRAM logins
// and applies ACLs: the SASL exchange, the authentication gate and the ACL filters see
// arbitrary frames.
func FuzzSecureServerStream(f *testing.F) {
	creds, err := security.OpenCredentials(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	addUser(f, creds, "alice", testPassword)
	authz, err := security.OpenAuthorizer(f.TempDir(), true, []string{"User:root"})
	if err != nil {
		f.Fatal(err)
	}
	sec := &netio.Security{Credentials: creds, AuthRequired: true, Authorizer: authz,
		Quotas: security.NewQuotas(security.QuotaConfig{Default: security.QuotaRates{RequestsPerSec: 1 << 20}})}
	conv := scram.SHA256.NewClient("alice", testPassword, nil)
	fuzzServerStream(f, sec, []wire.Message{
		&wire.APIVersionsRequest{ClientID: "fuzz"},
		&wire.SaslHandshakeRequest{Mechanism: scram.SHA256.Name},
		&wire.SaslAuthenticateRequest{AuthBytes: []byte(conv.First())},
		&wire.SaslAuthenticateRequest{AuthBytes: []byte("c=biws,r=x,p=AAAA")},
		&wire.MetadataRequest{},
		&wire.CreateAclsRequest{ACLs: []wire.ACLBinding{{ResourceType: 1, ResourceName: "t", PatternType: 1, Principal: "User:alice", Operation: 1, Permission: 2}}},
		&wire.DescribeUsersRequest{},
	})
}

// fuzzServerStream is the body of the server fuzz targets: seeds are the given requests,
// alone and concatenated, served by a fakebroker behind a server enforcing sec.
func fuzzServerStream(f *testing.F, sec *netio.Security, seeds []wire.Message) {
	var stream []byte
	for i, m := range seeds {
		frame := wire.AppendRequest(nil, uint32(i), m)
		f.Add(frame)
		stream = append(stream, frame...)
	}
	f.Add(stream)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 8, 0, 99, 0, 0, 0, 0, 0, 1})

	fake := fakebroker.New(f.TempDir(), nil)
	ln, err := netio.ListenShard(f.Context(), "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	// Long-polls are clamped so that a fuzzed max wait of days does not hold the
	// connection open after the input ends.
	clamp := netio.HandlerFunc(func(req *netio.Request) {
		if fr, ok := req.Body.(*wire.FetchRequest); ok {
			fr.MaxWaitMs = min(fr.MaxWaitMs, 50)
		}
		fake.Serve(req)
	})
	srv := netio.NewServer(clamp, netio.Config{FrameBytesMax: 1 << 16, WriteTimeout: time.Second, FrameReadTimeout: time.Second, Security: sec})
	go srv.Serve(ln, 0)
	f.Cleanup(func() { srv.Close(); fake.Close() })
	addr := ln.Addr().String()
	f.Fuzz(func(t *testing.T, b []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(3 * time.Second))
		go func() {
			nc.Write(b)
			nc.(*net.TCPConn).CloseWrite()
		}()
		// The server answers what it can and then closes (EOF from us ends its reader).
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Fatalf("server neither answered nor closed: %v", err)
		}
		// Still healthy for a well-formed client.
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(wire.AppendRequest(nil, 7, &wire.APIVersionsRequest{})); err != nil {
			t.Fatal(err)
		}
		h, _, _, err := wire.ReadResponse(c, nil, 1<<20)
		if err != nil || h.CorrelationID != 7 || h.ErrorCode != wire.ErrNone {
			t.Fatalf("server unhealthy after fuzz input: %+v %v", h, err)
		}
	})
}
