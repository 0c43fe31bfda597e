package main

// `ringlog user` and `ringlog acl`: SCRAM users and ACLs (docs/security.md), through the
// broker (administration needs a super-user, or alter/describe on the cluster, when the
// broker requires logins) or, with --data, straight in a stopped broker's data directory
// (how the first user of a broker with --auth required is made).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/security"
	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/wire"
)

func init() {
	register("user", "add, list and remove SCRAM users", func(args []string) error { return runSubcommands("user", userCommands, args) })
	register("acl", "add, list and remove ACLs", func(args []string) error { return runSubcommands("acl", aclCommands, args) })
}

// subcommand is one subcommand of a command (topic, group, user, acl).
type subcommand struct {
	usage string
	run   func(usage string, args []string, stdout io.Writer) error
}

var userCommands = map[string]subcommand{
	"add":    {"user add NAME [--mechanism M] [--iterations N] [--password-file F] [--data DIR]", userAdd},
	"list":   {"user list [NAME...] [--data DIR]", userList},
	"remove": {"user remove NAME [--mechanism M] [--data DIR]", userRemove},
}

var aclCommands = map[string]subcommand{
	"add":    {"acl add --principal User:NAME (--topic T | --group G | --cluster) [--prefixed] --operation OP[,OP] [--deny] [--data DIR]", aclAdd},
	"list":   {"acl list [--principal P] [--topic T | --group G | --cluster] [--data DIR]", aclList},
	"remove": {"acl remove [--principal P] [--topic T | --group G | --cluster] [--prefixed] [--operation OP] [--deny|--allow] [--data DIR]", aclRemove},
}

// runSubcommands runs the subcommand args[0] of the command name (topic, group, user, acl), or prints the group's
// usage.
func runSubcommands(name string, cmds map[string]subcommand, args []string) error {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(os.Stderr, "usage: ringlog %s SUBCOMMAND [--broker HOST:PORT] [ARGS]\n\nsubcommands:\n", name)
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "  ringlog %s\n", cmds[n].usage)
		}
		if len(args) == 0 {
			return errors.New("missing subcommand")
		}
		return nil
	}
	sub, ok := cmds[args[0]]
	if !ok {
		return fmt.Errorf("unknown subcommand %q (want one of %s)", args[0], strings.Join(names, ", "))
	}
	err := sub.run(sub.usage, args[1:], os.Stdout)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

// offline runs fn on a stopped broker's data directory, holding the broker's lock so that
// a broker cannot start (or be running) meanwhile.
func offline(dataDir string, fn func() error) error {
	if err := checkDataDir(dataDir); err != nil {
		return err
	}
	lock, err := shard.LockDataDir(dataDir)
	if err != nil {
		if errors.Is(err, shard.ErrDataDirInUse) {
			return fmt.Errorf("%w: a broker runs on %s; stop it, or use --broker with an admin login", err, dataDir)
		}
		return err
	}
	defer lock.Close()
	return fn()
}

// checkDataDir refuses a --data that is not a directory, saying so: the lock file's open
// would fail with a bare ENOENT (before a broker's first start there is no directory yet;
// ringlogd creates it).
func checkDataDir(dataDir string) error {
	switch fi, err := os.Stat(dataDir); {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("data directory %s does not exist: create it first (mkdir -p %s, owned by the broker's user) or check the path against ringlogd's --data", dataDir, dataDir)
	case err != nil:
		return fmt.Errorf("data directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("data directory %s is not a directory", dataDir)
	}
	return nil
}

const userPasswordEnv = "RINGLOG_USER_PASSWORD"

func userAdd(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("user add", usage)
	broker := brokerFlag(fs)
	dataDir := fs.String("data", "", "write the user into this stopped broker's data directory instead of asking --broker")
	mechanism := fs.String("mechanism", "", "SCRAM-SHA-256 or SCRAM-SHA-512 (default: both)")
	iterations := fs.Int("iterations", scram.IterationsDefault, fmt.Sprintf("PBKDF2 iterations (%d..%d)", scram.IterationsMin, scram.IterationsMax))
	passwordFile := fs.String("password-file", "", "file whose first line is the new password (default $"+userPasswordEnv+")")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "NAME"); err != nil {
		return err
	}
	user := positional[0]
	if err := security.ValidUserName(user); err != nil {
		return fmt.Errorf("%q: %w", user, err)
	}
	password, err := readSecret(*passwordFile, userPasswordEnv, "--password-file")
	if err != nil {
		return err
	}
	var mechs []string
	if *mechanism != "" {
		mechs = []string{*mechanism}
	}
	ups, err := client.UserUpsertions(user, password, *iterations, mechs...)
	if err != nil {
		return err
	}
	done := func() error {
		fmt.Fprintf(stdout, "set user %s (%s)\n", user, mechanismList(ups))
		return nil
	}
	if *dataDir != "" {
		return offline(*dataDir, func() error {
			creds, err := security.OpenCredentials(*dataDir)
			if err != nil {
				return err
			}
			for _, u := range ups {
				if err := creds.Set(u.User, scram.ByName(u.Mechanism), u.Salt, int(u.Iterations), u.SaltedPassword); err != nil {
					return err
				}
			}
			return done()
		})
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		var resp wire.AlterUsersResponse
		if err := c.Call(ctx, c.BrokerAddr(), &wire.AlterUsersRequest{Upsertions: ups}, &resp); err != nil {
			return err
		}
		for _, r := range resp.Results {
			if err := wire.CodeError(r.ErrorCode, r.ErrorMessage); err != nil {
				return err
			}
		}
		return done()
	})
}

func mechanismList(ups []wire.UserUpsertion) string {
	var names []string
	for _, u := range ups {
		names = append(names, u.Mechanism)
	}
	return strings.Join(names, ", ")
}

func userList(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("user list", usage)
	broker := brokerFlag(fs)
	dataDir := fs.String("data", "", "read the users of this stopped broker's data directory instead of asking --broker")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var names []string
	if len(positional) > 0 {
		names = positional
	}
	print := func(users []wire.UserDescription) error {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USER\tMECHANISMS")
		for _, u := range users {
			var mechs []string
			for _, m := range u.Mechanisms {
				mechs = append(mechs, fmt.Sprintf("%s (%d iterations)", m.Mechanism, m.Iterations))
			}
			fmt.Fprintf(tw, "%s\t%s\n", u.User, strings.Join(mechs, ", "))
		}
		return tw.Flush()
	}
	if *dataDir != "" {
		return offline(*dataDir, func() error {
			creds, err := security.OpenCredentials(*dataDir)
			if err != nil {
				return err
			}
			var users []wire.UserDescription
			for _, u := range creds.Describe(names) {
				d := wire.UserDescription{User: u.User}
				for _, m := range scram.Mechanisms {
					if it, ok := u.Mechanisms[m.Name]; ok {
						d.Mechanisms = append(d.Mechanisms, wire.UserMechanism{Mechanism: m.Name, Iterations: int32(it)})
					}
				}
				users = append(users, d)
			}
			return print(users)
		})
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		users, err := c.DescribeUsers(ctx, names...)
		if err != nil {
			return err
		}
		return print(users)
	})
}

func userRemove(usage string, args []string, stdout io.Writer) error {
	fs := newFlagSet("user remove", usage)
	broker := brokerFlag(fs)
	dataDir := fs.String("data", "", "remove the user from this stopped broker's data directory instead of asking --broker")
	mechanism := fs.String("mechanism", "", "remove only this mechanism's credential (default: the user)")
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(positional, "NAME"); err != nil {
		return err
	}
	user := positional[0]
	done := func() error {
		fmt.Fprintf(stdout, "removed user %s\n", user)
		return nil
	}
	if *dataDir != "" {
		return offline(*dataDir, func() error {
			creds, err := security.OpenCredentials(*dataDir)
			if err != nil {
				return err
			}
			if err := creds.Delete(user, *mechanism); err != nil {
				return err
			}
			return done()
		})
	}
	return withClient(*broker, func(ctx context.Context, c *client.Client) error {
		if err := c.DeleteUser(ctx, user, *mechanism); err != nil {
			return err
		}
		return done()
	})
}

// aclFlags are the rule fields of acl add/list/remove.
type aclFlags struct {
	principal, topic, group, operations string
	cluster, prefixed, deny, allow      bool
	dataDir                             string
}

func (f *aclFlags) register(fs *flag.FlagSet, withRule bool) {
	fs.StringVar(&f.principal, "principal", "", "User:NAME, or User:* for every principal")
	fs.StringVar(&f.topic, "topic", "", "topic name (with --prefixed: a name prefix; * is every topic)")
	fs.StringVar(&f.group, "group", "", "consumer group name (with --prefixed: a prefix; * is every group)")
	fs.BoolVar(&f.cluster, "cluster", false, "the cluster resource (create topics, administer users and ACLs)")
	fs.StringVar(&f.dataDir, "data", "", "work on this stopped broker's data directory instead of asking --broker")
	if withRule {
		fs.BoolVar(&f.prefixed, "prefixed", false, "the name is a prefix")
		fs.StringVar(&f.operations, "operation", "", "read, write, create, delete, describe, alter or all (comma-separated)")
		fs.BoolVar(&f.deny, "deny", false, "a deny rule (deny wins over allow)")
		fs.BoolVar(&f.allow, "allow", false, "only allow rules (acl remove)")
	}
}

// filter is the binding the flags name; zero fields where a flag was not given.
func (f *aclFlags) filter() (security.ACL, error) {
	var a security.ACL
	set := 0
	switch {
	case f.topic != "":
		a.Resource, a.Name = security.ResourceTopic, f.topic
		set++
	case f.group != "":
		a.Resource, a.Name = security.ResourceGroup, f.group
		set++
	}
	if f.cluster {
		a.Resource, a.Name = security.ResourceCluster, ""
		set++
	}
	if f.topic != "" && f.group != "" || set > 1 {
		return a, errors.New("one of --topic, --group and --cluster")
	}
	if f.prefixed {
		a.Pattern = security.PatternPrefixed
	}
	a.Principal = f.principal
	switch {
	case f.deny && f.allow:
		return a, errors.New("--deny and --allow are exclusive")
	case f.deny:
		a.Permission = security.Deny
	case f.allow:
		a.Permission = security.Allow
	}
	return a, nil
}

func (f *aclFlags) operationList() ([]security.Operation, error) {
	var ops []security.Operation
	for _, name := range strings.Split(f.operations, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		op, err := security.ParseOperation(name)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// parseACL parses the flags of an acl subcommand (no positional arguments) and returns
// the broker, the flags and the rule or filter they name.
func parseACL(name, usage string, args []string, withRule bool) (string, *aclFlags, security.ACL, error) {
	fs := newFlagSet(name, usage)
	broker := brokerFlag(fs)
	f := &aclFlags{}
	f.register(fs, withRule)
	positional, err := parseArgs(fs, args)
	if err != nil {
		return "", nil, security.ACL{}, err
	}
	if err := wantArgs(positional); err != nil {
		return "", nil, security.ACL{}, err
	}
	filter, err := f.filter()
	return *broker, f, filter, err
}

func aclAdd(usage string, args []string, stdout io.Writer) error {
	broker, f, base, err := parseACL("acl add", usage, args, true)
	if err != nil {
		return err
	}
	if base.Resource == 0 || base.Principal == "" {
		return errors.New("--principal and one of --topic, --group, --cluster are required")
	}
	if base.Pattern == 0 {
		base.Pattern = security.PatternLiteral
	}
	if base.Permission == 0 {
		base.Permission = security.Allow
	}
	ops, err := f.operationList()
	if err != nil || len(ops) == 0 {
		return errors.Join(err, errors.New("--operation is required"))
	}
	var rules []security.ACL
	for _, op := range ops {
		r := base
		r.Operation = op
		if err := r.Validate(); err != nil {
			return err
		}
		rules = append(rules, r)
	}
	done := func() error {
		for _, r := range rules {
			fmt.Fprintf(stdout, "added %s\n", r)
		}
		return nil
	}
	if f.dataDir != "" {
		return offline(f.dataDir, func() error {
			a, err := security.OpenAuthorizer(f.dataDir, true, nil)
			if err != nil {
				return err
			}
			if err := a.Add(rules); err != nil {
				return err
			}
			return done()
		})
	}
	return withClient(broker, func(ctx context.Context, c *client.Client) error {
		var bindings []wire.ACLBinding
		for _, r := range rules {
			bindings = append(bindings, binding(r))
		}
		if err := c.CreateACLs(ctx, bindings...); err != nil {
			return err
		}
		return done()
	})
}

func binding(a security.ACL) wire.ACLBinding {
	return wire.ACLBinding{ResourceType: int8(a.Resource), ResourceName: a.Name, PatternType: int8(a.Pattern),
		Principal: a.Principal, Operation: int8(a.Operation), Permission: int8(a.Permission)}
}

func ruleOf(b wire.ACLBinding) security.ACL {
	return security.ACL{Resource: security.ResourceType(b.ResourceType), Name: b.ResourceName, Pattern: security.PatternType(b.PatternType),
		Principal: b.Principal, Operation: security.Operation(b.Operation), Permission: security.Permission(b.Permission)}
}

func printACLs(stdout io.Writer, rules []security.ACL) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tPERMISSION\tOPERATION\tRESOURCE\tNAME\tPATTERN")
	for _, r := range rules {
		name := r.Name
		if r.Resource == security.ResourceCluster {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Permission, r.Operation, r.Resource, name, r.Pattern)
	}
	return tw.Flush()
}

func aclList(usage string, args []string, stdout io.Writer) error {
	broker, f, filter, err := parseACL("acl list", usage, args, false)
	if err != nil {
		return err
	}
	if f.dataDir != "" {
		return offline(f.dataDir, func() error {
			a, err := security.OpenAuthorizer(f.dataDir, true, nil)
			if err != nil {
				return err
			}
			return printACLs(stdout, a.List(filter))
		})
	}
	return withClient(broker, func(ctx context.Context, c *client.Client) error {
		bindings, err := c.DescribeACLs(ctx, binding(filter))
		if err != nil {
			return err
		}
		var rules []security.ACL
		for _, b := range bindings {
			rules = append(rules, ruleOf(b))
		}
		return printACLs(stdout, rules)
	})
}

func aclRemove(usage string, args []string, stdout io.Writer) error {
	broker, f, base, err := parseACL("acl remove", usage, args, true)
	if err != nil {
		return err
	}
	if base == (security.ACL{}) && f.operations == "" {
		return errors.New("say which rules: --principal, --topic, --group, --cluster or --operation")
	}
	ops, err := f.operationList()
	if err != nil {
		return err
	}
	filters := []security.ACL{base}
	if len(ops) > 0 {
		filters = filters[:0]
		for _, op := range ops {
			r := base
			r.Operation = op
			filters = append(filters, r)
		}
	}
	report := func(removed []security.ACL) error {
		for _, r := range removed {
			fmt.Fprintf(stdout, "removed %s\n", r)
		}
		if len(removed) == 0 {
			fmt.Fprintln(stdout, "no rule matched")
		}
		return nil
	}
	if f.dataDir != "" {
		return offline(f.dataDir, func() error {
			a, err := security.OpenAuthorizer(f.dataDir, true, nil)
			if err != nil {
				return err
			}
			removed, err := a.Remove(filters)
			if err != nil {
				return err
			}
			return report(removed)
		})
	}
	return withClient(broker, func(ctx context.Context, c *client.Client) error {
		var bindings []wire.ACLBinding
		for _, r := range filters {
			bindings = append(bindings, binding(r))
		}
		deleted, err := c.DeleteACLs(ctx, bindings...)
		if err != nil {
			return err
		}
		var removed []security.ACL
		for _, b := range deleted {
			removed = append(removed, ruleOf(b))
		}
		return report(removed)
	})
}
