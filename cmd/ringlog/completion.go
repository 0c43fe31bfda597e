package main

// `ringlog completion bash|zsh`: shell completion scripts for commands, subcommands,
// flags and the values of enumerated flags. The flags are read from the commands' own
// flag sets (their -h output), so the scripts follow the commands without a second list.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func init() {
	register("completion", "print a shell completion script: bash or zsh", func(args []string) error {
		return runCompletion(args, os.Stdout)
	})
}

const completionUsage = `usage: ringlog completion bash|zsh

bash: source <(ringlog completion bash)       # or save it as /etc/bash_completion.d/ringlog
zsh:  source <(ringlog completion zsh)        # or save it as _ringlog in a directory of $fpath`

func runCompletion(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, completionUsage)
		return errors.New("want one argument: bash or zsh")
	}
	spec := completionSpec()
	switch args[0] {
	case "bash":
		_, err := io.WriteString(stdout, bashCompletion(spec))
		return err
	case "zsh":
		_, err := io.WriteString(stdout, zshCompletion(spec))
		return err
	case "-h", "--help", "help":
		fmt.Fprintln(os.Stderr, completionUsage)
		return nil
	}
	return fmt.Errorf("unknown shell %q: want bash or zsh", args[0])
}

// completion is what the scripts complete.
type completion struct {
	commands    []string            // top-level commands
	subcommands map[string][]string // command -> its subcommands
	flags       map[string][]string // "command" or "command sub" -> --flags
	values      map[string][]string // --flag -> the values it takes
}

// flagValues are the enumerated values of flags, wherever they appear.
var flagValues = map[string][]string{
	"--acks":        {"0", "1", "all"},
	"--compression": {"none", "zstd"},
	"--from":        {"earliest", "latest"},
	"--input":       {"lines", "json"},
	"--format":      {"json"},
	"--irq-mode":    {"dedicated", "shared"},
}

var usageFlagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][-A-Za-z0-9.]*)`)

// helpFlags runs a command's flag parsing with -h and returns the flags its usage lists.
func helpFlags(run func() error) []string {
	var out bytes.Buffer
	saved := usageOutput
	usageOutput = &out
	defer func() { usageOutput = saved }()
	run()
	return usageFlags(out.String())
}

// usageFlags returns the flags a flag set's usage text lists.
func usageFlags(usage string) []string {
	var flags []string
	for _, m := range usageFlagLine.FindAllStringSubmatch(usage, -1) {
		flags = append(flags, "--"+m[1])
	}
	sort.Strings(flags)
	return flags
}

func completionSpec() completion {
	c := completion{subcommands: map[string][]string{}, flags: map[string][]string{}, values: flagValues}
	for name := range commands {
		c.commands = append(c.commands, name)
	}
	sort.Strings(c.commands)
	c.flags["produce"] = helpFlags(func() error { _, err := parseProduceFlags([]string{"-h"}); return err })
	c.flags["consume"] = helpFlags(func() error { _, err := parseConsumeFlags([]string{"-h"}); return err })
	for cmd, subs := range map[string]map[string]subcommand{"topic": topicCommands, "group": groupCommands, "user": userCommands, "acl": aclCommands, "partition": partitionCommands, "cluster": clusterCommands} {
		for name, sub := range subs {
			c.subcommands[cmd] = append(c.subcommands[cmd], name)
			c.flags[cmd+" "+name] = helpFlags(func() error { return sub.run(sub.usage, []string{"-h"}, io.Discard) })
		}
	}
	c.flags["top"] = helpFlags(func() error { _, err := parseTopFlags([]string{"-h"}); return err })
	for name, sub := range benchCommands {
		c.subcommands["bench"] = append(c.subcommands["bench"], name)
		c.flags["bench "+name] = helpFlags(func() error { return sub.run([]string{"-h"}) })
	}
	for _, name := range []string{"check", "plan", "apply", "show", "snapshot"} {
		c.subcommands["tune"] = append(c.subcommands["tune"], name)
		var usage bytes.Buffer // -h prints the subcommand's own flags too (tune plan --format)
		runTune([]string{name, "-h"}, &usage)
		c.flags["tune "+name] = usageFlags(usage.String())
	}
	c.subcommands["completion"] = []string{"bash", "zsh"}
	for _, subs := range c.subcommands {
		sort.Strings(subs)
	}
	return c
}

// caseArms renders `pattern) NAME="words";;` lines for a shell case statement.
func caseArms(m map[string][]string, indent, variable string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s%q) %s=%q ;;\n", indent, k, variable, strings.Join(m[k], " "))
	}
	return b.String()
}

// valueArms renders case arms for flags with enumerated values (both - and --
// spellings); action is a format for the space-separated values.
func valueArms(values map[string][]string, indent, action string) string {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s%s|%s) %s ;;\n", indent, k, strings.TrimPrefix(k, "-"), fmt.Sprintf(action, strings.Join(values[k], " ")))
	}
	return b.String()
}

// The scripts share one shape: find the command and subcommand among the words before
// the cursor (skipping flags and the global --broker's value), then complete a flag's
// value, a flag, a subcommand or a command.

func bashCompletion(c completion) string {
	return `# bash completion for ringlog: source <(ringlog completion bash)
_ringlog() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local cmd="" sub="" i word subs="" flags=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    case $word in
      --broker|-broker) ((i++)); continue ;;
      -*) continue ;;
    esac
    if [[ -z $cmd ]]; then cmd=$word
    elif [[ -z $sub ]]; then sub=$word
    fi
  done
  case $prev in
` + valueArms(c.values, "    ", `COMPREPLY=($(compgen -W "%s" -- "$cur")); return`) + `    --broker|-broker) COMPREPLY=(); return ;;
  esac
  if [[ -z $cmd ]]; then
    COMPREPLY=($(compgen -W "` + strings.Join(c.commands, " ") + ` --broker --help" -- "$cur"))
    return
  fi
  case $cmd in
` + caseArms(c.subcommands, "    ", "subs") + `  esac
  if [[ -n $subs && -z $sub ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    return
  fi
  local key=$cmd
  [[ -n $subs ]] && key="$cmd $sub"
  case $key in
` + caseArms(c.flags, "    ", "flags") + `  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  fi
}
complete -o default -F _ringlog ringlog
`
}

func zshCompletion(c completion) string {
	return `#compdef ringlog
# zsh completion for ringlog: source <(ringlog completion zsh), or save as _ringlog in $fpath
_ringlog() {
  local cur=${words[CURRENT]} prev=${words[CURRENT-1]}
  local cmd="" sub="" i word subs="" flags=""
  for ((i = 2; i < CURRENT; i++)); do
    word=${words[i]}
    case $word in
      --broker|-broker) ((i++)); continue ;;
      -*) continue ;;
    esac
    if [[ -z $cmd ]]; then cmd=$word
    elif [[ -z $sub ]]; then sub=$word
    fi
  done
  case $prev in
` + valueArms(c.values, "    ", "compadd -- %s; return") + `    --broker|-broker) return ;;
  esac
  if [[ -z $cmd ]]; then
    compadd -- ` + strings.Join(c.commands, " ") + ` --broker --help
    return
  fi
  case $cmd in
` + caseArms(c.subcommands, "    ", "subs") + `  esac
  if [[ -n $subs && -z $sub ]]; then
    compadd -- ${=subs}
    return
  fi
  local key=$cmd
  [[ -n $subs ]] && key="$cmd $sub"
  case $key in
` + caseArms(c.flags, "    ", "flags") + `  esac
  if [[ $cur == -* ]]; then
    compadd -- ${=flags}
  else
    _files
  fi
}
if [[ $funcstack[1] == _ringlog ]]; then
  _ringlog "$@"
else
  compdef _ringlog ringlog
fi
`
}
