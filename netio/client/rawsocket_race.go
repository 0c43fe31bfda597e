//go:build race

package client

// rawSocketOn is false under the race detector. It learns that a socket write happens
// before the peer's read from internal/poll's annotations on net.Conn's Read and Write;
// raw system calls carry none, so a test whose in-process server and client synchronise
// only through the socket (a handler that signals a channel, then answers; the test that
// closes the channel after the answer) showed false races (CI at b244831, six
// netio/client tests). Race builds therefore read and write through net.Conn; the raw
// calls are covered by the other builds and by rawsocket_test.go, which runs in both.
const rawSocketOn = false
