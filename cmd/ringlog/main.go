// Command ringlog is the ringlog CLI: topic, produce, consume, group, cluster, partition,
// user, acl, top, bench, tune, completion and version (docs/operations.md, "ringlog (the
// CLI)"). It holds no broker logic: it talks to brokers through netio/client, reads
// /metrics through netio/admin/scrape, and uses the types and calls of the packages that
// own the rest: tuning, bench, the controller's command and view types
// (replication/controller, replication/cluster), and engine/shard and netio/security for
// the offline commands on a stopped broker's data directory (`ringlog topic repair`,
// `ringlog user add --data`).
//
// Each subcommand lives in its own file and registers itself in init() with register, so
// that subcommands can be added without touching this file.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("ringlog: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ringlog [--broker HOST:PORT[,HOST:PORT...]] COMMAND [ARGS]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nglobal flags (before or after the command):\n  --broker HOST:PORT[,HOST:PORT...]   seed broker addresses, repeatable (env "+brokerEnv+", default "+brokerDefault+")")
}

// globalBroker is --broker given before the command (`ringlog --broker H:P topic list`,
// as kcat and rpk users type it). brokerFlag uses it as the default, so a --broker after
// the command still wins.
var globalBroker string

// splitGlobalFlags consumes the global flags before the command and returns the command
// and its arguments. The global flags are --broker (with a space or =) and -h/--help.
func splitGlobalFlags(args []string) (rest []string, help bool, err error) {
	globalSeen := false
	for len(args) > 0 {
		arg := args[0]
		if arg == "--" {
			return args[1:], false, nil
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			return args, false, nil
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		switch name {
		case "h", "help":
			return args[1:], true, nil
		case "broker":
			if !hasValue {
				if len(args) < 2 {
					return nil, false, fmt.Errorf("%s needs a value HOST:PORT", arg)
				}
				value, args = args[1], args[1:]
			}
			if value == "" {
				return nil, false, fmt.Errorf("%s: empty address", arg)
			}
			if globalSeen { // repeated: more seeds
				value = globalBroker + "," + value
			}
			globalBroker, globalSeen = value, true
		case "version":
			return append([]string{"version"}, args[1:]...), false, nil
		default:
			return nil, false, fmt.Errorf("unknown global flag %q (global flags: --broker HOST:PORT; command flags go after the command)", arg)
		}
		args = args[1:]
	}
	return nil, false, nil
}

// runCLI runs one command line and returns the exit status: 0, 1 when the command
// failed, 2 for a usage error.
func runCLI(args []string, stderr io.Writer) int {
	args, help, err := splitGlobalFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "ringlog: %v\n", err)
		return 2
	}
	if help || len(args) > 0 && args[0] == "help" {
		usage(stderr)
		return 0
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ringlog: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(args[1:]); err != nil {
		fmt.Fprintf(stderr, "ringlog %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func main() {
	if size, ok := os.LookupEnv(echoChildEnv); ok {
		os.Exit(echoChildMain(size))
	}
	if spec, ok := os.LookupEnv(floorChildEnv); ok {
		os.Exit(floorChildMain(spec))
	}
	os.Exit(runCLI(os.Args[1:], os.Stderr))
}
