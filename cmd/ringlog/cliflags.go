package main

// Shared plumbing of the broker-facing subcommands (topic, produce, consume): flag parsing
// that accepts positional arguments anywhere, the --broker flag, and dialing.

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/security"
)

const (
	brokerEnv          = "RINGLOG_BROKER"
	brokerDefault      = "127.0.0.1:9400"
	dialTimeoutDefault = 5 * time.Second
	// flagParseRoundsMax bounds the parse/positional loop of parseArgs: each round consumes
	// at least one argument, so this is also the most arguments a command line may have.
	flagParseRoundsMax = 4096
)

// errHelp is returned by parseArgs after printing usage for -h; commands return nil on it.
var errHelp = errors.New("help requested")

// newFlagSet returns a FlagSet that reports errors through the returned error only (main
// prints it as one line) and prints usage only when asked with -h.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // parseArgs prints usage for -h only; errors are one line
	usages[fs] = usage
	return fs
}

// usages holds each FlagSet's synopsis for printUsage.
var usages = map[*flag.FlagSet]string{}

// usageOutput is where -h prints (tests silence it).
var usageOutput io.Writer = os.Stderr

func printUsage(fs *flag.FlagSet) {
	fmt.Fprintf(usageOutput, "usage: ringlog %s\n\nflags:\n", usages[fs])
	fs.SetOutput(usageOutput)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseArgs parses flags interleaved with positional arguments (`topic create NAME
// --partitions 3` and `topic create --partitions 3 NAME` are the same) and returns the
// positionals in order. "--" ends flag parsing.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	positional, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(fs)
		return nil, errHelp
	}
	return positional, err
}

// parseBenchArgs is parseArgs for the bench subcommands, whose flag sets print their own
// usage: flags may follow the WORKLOAD (`bench run smoke.json --driver mem`), and
// fs.Args() holds the positionals afterwards.
func parseBenchArgs(fs *flag.FlagSet, args []string) error {
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	return fs.Parse(append([]string{"--"}, positional...)) // sets fs.Args(), no flag
}

// parseInterleaved parses the flags among args and returns the positionals in order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for range flagParseRoundsMax {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// flag.Parse stops at the first non-flag, or after "--" (which it consumes).
		consumedDashes := len(args) > len(rest) && args[len(args)-len(rest)-1] == "--"
		if consumedDashes {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return nil, fmt.Errorf("more than %d arguments", flagParseRoundsMax)
}

// wantArgs checks the positional argument count.
func wantArgs(positional []string, names ...string) error {
	if len(positional) < len(names) {
		return fmt.Errorf("missing %s", strings.Join(names[len(positional):], " "))
	}
	if len(positional) > len(names) {
		return fmt.Errorf("unexpected argument %q", positional[len(names)])
	}
	return nil
}

// brokerFlag registers --broker, defaulting to a --broker given before the command, then
// $RINGLOG_BROKER, then 127.0.0.1:9400. The value is a list of seed brokers separated by
// commas; a repeated --broker adds to it. The client uses the first seed that answers and
// learns the cluster's other brokers from metadata.
func brokerFlag(fs *flag.FlagSet) *string {
	def := defaultBroker()
	connSecurityFlags(fs)
	f := &brokerListFlag{addrs: &def}
	fs.Var(f, "broker", "seed broker addresses HOST:PORT[,HOST:PORT...] (repeatable; env "+brokerEnv+")")
	return f.addrs
}

// defaultBroker is the broker a command talks to without its own --broker: a --broker
// given before the command, then $RINGLOG_BROKER, then 127.0.0.1:9400.
func defaultBroker() string {
	if globalBroker != "" {
		return globalBroker
	}
	if env := os.Getenv(brokerEnv); env != "" {
		return env
	}
	return brokerDefault
}

// brokerListFlag is --broker: the first use replaces the default, later ones append.
type brokerListFlag struct {
	addrs *string
	set   bool
}

func (f *brokerListFlag) String() string {
	if f.addrs == nil {
		return ""
	}
	return *f.addrs
}

func (f *brokerListFlag) Set(s string) error {
	if _, err := client.SeedList(s); err != nil || strings.Trim(s, ", ") == "" {
		return fmt.Errorf("%q: want HOST:PORT[,HOST:PORT...]", s)
	}
	if f.set {
		*f.addrs += "," + s
	} else {
		*f.addrs, f.set = s, true
	}
	return nil
}

// connSecurity holds the TLS and SASL flags of the command being run (every
// broker-facing command registers them with brokerFlag; defining them resets them).
var connSecurity struct {
	tls              security.ClientTLSOptions
	saslUser         string
	saslMechanism    string
	saslPasswordFile string
}

const (
	saslUserEnv     = "RINGLOG_SASL_USER"
	saslPasswordEnv = "RINGLOG_SASL_PASSWORD"
)

func connSecurityFlags(fs *flag.FlagSet) {
	tlsFlags(fs, &connSecurity.tls)
	fs.StringVar(&connSecurity.saslUser, "sasl-user", os.Getenv(saslUserEnv), "log in with SASL/SCRAM as this user (env "+saslUserEnv+"); the password comes from --sasl-password-file or $"+saslPasswordEnv)
	fs.StringVar(&connSecurity.saslMechanism, "sasl-mechanism", "SCRAM-SHA-512", "SCRAM-SHA-512 or SCRAM-SHA-256")
	fs.StringVar(&connSecurity.saslPasswordFile, "sasl-password-file", "", "file whose first line is the --sasl-user password (never a flag value: it would show in ps)")
}

// tlsFlags registers the client TLS flags into o; any of them turns TLS on (clientTLS).
func tlsFlags(fs *flag.FlagSet, o *security.ClientTLSOptions) {
	fs.StringVar(&o.CAFile, "tls-ca", "", "connect over TLS, verifying the broker against these PEM CA certificates")
	fs.StringVar(&o.CertFile, "tls-cert", "", "connect over TLS with this PEM client certificate (mutual TLS; with --tls-key)")
	fs.StringVar(&o.KeyFile, "tls-key", "", "private key of --tls-cert")
	fs.BoolVar(&o.InsecureSkipVerify, "tls-insecure-skip-verify", false, "connect over TLS without verifying the broker's certificate (tests only)")
}

// clientTLS is the TLS configuration of the flags tlsFlags registered; nil when none is set.
func clientTLS(o security.ClientTLSOptions) (*tls.Config, error) {
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" && !o.InsecureSkipVerify {
		return nil, nil
	}
	return security.ClientConfig(o)
}

// saslConfig is the login of the command's flags; nil without --sasl-user.
func saslConfig() (*client.SASLConfig, error) {
	cs := &connSecurity
	if cs.saslUser == "" {
		return nil, nil
	}
	password, err := readSecret(cs.saslPasswordFile, saslPasswordEnv, "--sasl-password-file")
	if err != nil {
		return nil, err
	}
	return &client.SASLConfig{Mechanism: cs.saslMechanism, User: cs.saslUser, Password: password}, nil
}

// secretBytesMax bounds a password file.
const secretBytesMax = 4096

// readSecret returns the first line of file, else the environment variable env. Secrets
// never come from flag values, which any user can read in the process list.
func readSecret(file, env, flagName string) (string, error) {
	if file == "" {
		if v, ok := os.LookupEnv(env); ok && v != "" {
			return v, nil
		}
		return "", fmt.Errorf("no password: give %s FILE or set $%s", flagName, env)
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, secretBytesMax+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	if len(data) > secretBytesMax {
		return "", fmt.Errorf("%s: over %d bytes", flagName, secretBytesMax)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", fmt.Errorf("%s: empty password", flagName)
	}
	return line, nil
}

// clientConfig is the client configuration of the command's flags.
func clientConfig(broker string) (client.Config, error) {
	cfg := client.Config{Broker: broker, ClientID: "ringlog-cli", DialTimeout: dialTimeoutDefault}
	tc, err := clientTLS(connSecurity.tls)
	if err != nil {
		return cfg, err
	}
	cfg.TLS = tc
	sasl, err := saslConfig()
	if err != nil {
		return cfg, err
	}
	cfg.SASL = sasl
	return cfg, nil
}

// dial connects to the broker, with a short dial timeout so that a broker that is down
// fails the command quickly.
func dial(ctx context.Context, broker string) (*client.Client, error) {
	cfg, err := clientConfig(broker)
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		if cfg.TLS == nil && errors.Is(err, client.ErrConnClosed) && strings.HasSuffix(err.Error(), ": EOF") {
			// A TLS listener closes a plain client's connection at its first bytes (the
			// client keeps the cause as text: no io.EOF in the chain).
			return nil, fmt.Errorf("connect to broker %s: %w (the broker closed the connection: if it serves TLS, ringlogd --tls-cert, give --tls-ca)", broker, err)
		}
		return nil, fmt.Errorf("connect to broker %s: %w", broker, err)
	}
	return c, nil
}

// keyValueFlag collects repeated k=v flags.
type keyValueFlag map[string]string

func (f keyValueFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k+"="+f[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (f keyValueFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	f[k] = v
	return nil
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	*f = append(*f, s)
	return nil
}

// commandContext is the context a command runs under: cancelled on SIGINT/SIGTERM.
func commandContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
