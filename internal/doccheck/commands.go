package doccheck

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Command is one invocation of a binary (`ringlog ...`, `ringlogd ...`) in a doc's code:
// a code span, or a line of a fenced block. Args are its words up to the end of the shell
// command (a pipe, &&, ;, a redirection or a comment ends it), with synopsis brackets and
// quotes taken off: `[--partitions N]` reads as "--partitions", "N".
type Command struct {
	File   string
	Line   int
	Binary string
	Args   []string
	Text   string // the code it was read from
}

var (
	// binaryWord is a binary's name, bare or with a path (./cmd/ringlogd, bin/ringlog).
	binaryWord = regexp.MustCompile(`^(?:[A-Za-z0-9_.$/{}-]*/)?([a-z][a-z0-9-]*)$`)
	flagWord   = regexp.MustCompile(`^--?([A-Za-z0-9][A-Za-z0-9_.-]*)`)
)

// launchers run the command that follows them (`sudo ringlogd`, `exec ringlogd`). A
// binary's name after any other word is an argument (`journalctl -u ringlogd`, `pidof
// ringlogd`), not an invocation; `go run ./cmd/ringlogd` is read by its path (invoked).
var launchers = map[string]bool{"sudo": true, "exec": true, "nohup": true, "time": true, "env": true}

// wrapperArgs are launchers whose own arguments precede the command (`nice -n 15 ringlog
// bench ...`, `flock LOCK ringlog ...`); the binary may follow them after any number of words.
var wrapperArgs = map[string]bool{"nice": true, "flock": true, "taskset": true, "numactl": true, "timeout": true, "chrt": true, "ionice": true}

// Commands returns the invocations of the named binaries in the docs' code.
func Commands(d *Doc, binaries ...string) []Command {
	want := map[string]bool{}
	for _, b := range binaries {
		want[b] = true
	}
	var out []Command
	for _, c := range d.Code {
		for _, words := range shellCommands(strings.ReplaceAll(c.Text, `\|`, `|`)) {
			for i, w := range words {
				m := binaryWord.FindStringSubmatch(w)
				if m == nil || !want[m[1]] || !invoked(words[:i], w) {
					continue
				}
				out = append(out, Command{File: d.Path, Line: c.Line, Binary: m[1], Args: synopsisWords(words[i+1:]), Text: c.Text})
				break
			}
		}
	}
	return out
}

// CommandsUnder returns the invocations of the binaries in the docs under root (Files).
func CommandsUnder(root string, binaries ...string) ([]Command, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	tree := NewTree(root)
	var cmds []Command
	for _, f := range files {
		d, err := tree.Doc(f)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, Commands(d, binaries...)...)
	}
	return cmds, nil
}

// invoked says whether a binary's word, after the words before it in its shell command,
// runs it.
func invoked(before []string, word string) bool {
	if strings.Contains(word, "/cmd/") || strings.HasPrefix(word, "cmd/") {
		return len(before) > 0 && before[len(before)-1] == "run" // go run ./cmd/X, not go test
	}
	for i, w := range before {
		switch {
		case w == "$" && i == 0: // a prompt ("#" starts a comment: shellCommands dropped it)
		case strings.Contains(w, "=") && !strings.HasPrefix(w, "-"): // VAR=value
		case launchers[w]:
		case wrapperArgs[w]:
			return true
		default:
			return false
		}
	}
	return true
}

// shellCommands splits code into shell commands' words. It ends a command at |, ||, &&,
// ;, & and newlines outside synopsis brackets, drops redirections and comments, and reads
// a $(...) substitution as a command of its own. It is not a shell: it reads docs, where
// `[--a X | --b Y]` is a synopsis, not a pipe.
func shellCommands(code string) [][]string {
	var commands [][]string
	var words []string
	depth := 0
	skipRest := false
	flush := func() {
		if len(words) > 0 {
			commands = append(commands, words)
		}
		words, depth, skipRest = nil, 0, false
	}
	substitution := func(inner string) { commands = append(commands, shellCommands(inner)...) }
	for _, line := range strings.Split(code, "\n") {
		for _, w := range shellWords(line, substitution) {
			atTop := depth <= 0
			depth += strings.Count(w, "[") + strings.Count(w, "(") - strings.Count(w, "]") - strings.Count(w, ")")
			switch {
			case atTop && (w == "|" || w == "||" || w == "&&" || w == "&" || w == ";"):
				flush()
				continue
			case atTop && strings.HasPrefix(w, "#"):
				skipRest = true
			case atTop && (strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>")):
				skipRest = true
			}
			if skipRest {
				continue
			}
			if end, ok := strings.CutSuffix(w, ";"); ok && depth <= 0 {
				words = append(words, end)
				flush()
				continue
			}
			words = append(words, w)
		}
		flush()
	}
	return commands
}

// shellWords splits one line into words at blanks outside quotes. Quotes come off and
// their content stays in the word; a $(...), outside single quotes, becomes the word part
// "$()" and its content goes to substitution.
func shellWords(line string, substitution func(string)) []string {
	var words []string
	var word strings.Builder
	inWord := false
	var quote byte // the open quote, or 0
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote == 0 && (ch == '\'' || ch == '"'):
			quote, inWord = ch, true
		case quote != 0 && ch == quote:
			quote = 0
		case quote != '\'' && ch == '$' && i+1 < len(line) && line[i+1] == '(':
			nesting, j := 1, i+2
			for ; j < len(line) && nesting > 0; j++ {
				switch line[j] {
				case '(':
					nesting++
				case ')':
					nesting--
				}
			}
			inner := line[i+2 : j]
			if nesting == 0 {
				inner = line[i+2 : j-1]
			}
			substitution(inner)
			word.WriteString("$()")
			i, inWord = j-1, true
		case quote == 0 && (ch == ' ' || ch == '\t'):
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// synopsisWords takes synopsis and shell punctuation off words: brackets, parentheses,
// braces, quotes, a trailing comma, and ellipses (which drop out).
func synopsisWords(words []string) []string {
	var out []string
	for _, w := range words {
		w = strings.Trim(w, "[](){}\"'`,")
		if w == "" || w == "..." || w == "…" {
			continue
		}
		out = append(out, w)
	}
	return out
}

// FlagName returns the name of a flag word (--name, -name, --name=value) and whether arg
// is one. "-" and "--" are not flags, nor is a negative number.
func FlagName(arg string) (string, bool) {
	m := flagWord.FindStringSubmatch(arg)
	if m == nil || arg[1] != '-' && arg[1] >= '0' && arg[1] <= '9' {
		return "", false
	}
	return strings.TrimRight(m[1], "."), true
}

// CLI describes a binary's command line for CheckCommands.
type CLI struct {
	Binary string
	// Commands are the binary's commands; none for a binary that takes only flags (ringlogd).
	Commands map[string]bool
	// Subcommands of the commands that have them (ringlog topic: create, list, ...).
	Subcommands map[string][]string
	// Flags by where they may appear: "" before any command (the binary's own flags),
	// "command", or "command subcommand". -h and --help are flags everywhere.
	Flags map[string][]string
	// GlobalValueFlags are flags before the command that take a value as the next word
	// (ringlog --broker ADDR), so that the command is found after it.
	GlobalValueFlags map[string]bool
}

// CheckCommands checks that every command, subcommand and flag the commands name exists
// in cli. A command or subcommand written as a placeholder (NAME, COMMAND) is not checked,
// and flags after it are checked against every subcommand's; `a|b` names alternatives.
// exempt maps a command line as the docs show it ("ringlog --partition 3 consume t") to
// why it is shown although it is wrong (a usage error the docs demonstrate).
func CheckCommands(cmds []Command, cli CLI, exempt map[string]string) []Problem {
	var problems []Problem
	for _, c := range cmds {
		if c.Binary != cli.Binary {
			continue
		}
		if _, ok := exempt[strings.Join(append([]string{c.Binary}, c.Args...), " ")]; ok {
			continue
		}
		for _, msg := range cli.check(c.Args) {
			problems = append(problems, Problem{File: c.File, Line: c.Line,
				Msg: fmt.Sprintf("`%s %s`: %s", c.Binary, strings.Join(c.Args, " "), msg)})
		}
	}
	return problems
}

func (cli CLI) check(args []string) []string {
	var msgs []string
	has := func(sets []string, name string) bool {
		if name == "h" || name == "help" {
			return true
		}
		for _, set := range sets {
			if slices.Contains(cli.Flags[set], name) {
				return true
			}
		}
		return false
	}
	if len(cli.Commands) == 0 { // flags and their values only
		for _, arg := range args {
			if name, ok := FlagName(arg); ok && !has([]string{""}, name) {
				msgs = append(msgs, fmt.Sprintf("%s has no flag --%s", cli.Binary, name))
			}
		}
		return msgs
	}
	i := 0
	for ; i < len(args); i++ {
		name, ok := FlagName(args[i])
		if !ok {
			break
		}
		if !has([]string{""}, name) {
			msgs = append(msgs, fmt.Sprintf("%s has no flag --%s before the command", cli.Binary, name))
		}
		if cli.GlobalValueFlags[name] && !strings.Contains(args[i], "=") {
			i++
		}
	}
	if i == len(args) || placeholder(args[i]) {
		return msgs
	}
	command := args[i]
	if !cli.Commands[command] {
		return append(msgs, fmt.Sprintf("%s has no command %q", cli.Binary, command))
	}
	where := cli.Binary + " " + command
	sets := []string{command}
	if subs := cli.Subcommands[command]; len(subs) > 0 {
		sets = nil
		for _, sub := range subs {
			sets = append(sets, command+" "+sub)
		}
		if i+1 < len(args) && !isFlag(args[i+1]) && !placeholder(args[i+1]) {
			i++
			sets = nil
			for _, sub := range strings.Split(args[i], "|") {
				if !slices.Contains(subs, sub) {
					msgs = append(msgs, fmt.Sprintf("%s has no subcommand %q", where, sub))
					continue
				}
				sets = append(sets, command+" "+sub)
			}
			where += " " + args[i]
		}
	}
	for _, arg := range args[i+1:] {
		if name, ok := FlagName(arg); ok && !has(sets, name) {
			msgs = append(msgs, fmt.Sprintf("%s has no flag --%s", where, name))
		}
	}
	return msgs
}

func isFlag(word string) bool {
	_, ok := FlagName(word)
	return ok
}

// placeholder says whether a word stands for something (NAME, COMMAND:, <topic>, $T).
func placeholder(word string) bool {
	return strings.ToUpper(word) == word || strings.HasPrefix(word, "<") || strings.HasPrefix(word, "$")
}

// FlagMention is a flag named on its own in a code span (`--max-connections`, `--acks
// all`), outside any command line: the docs' commonest way to name a flag.
type FlagMention struct {
	File string
	Line int
	Name string // as written: may be a pattern (quota-*, group-min/max-session-timeout)
	Text string
}

// FlagMentions returns the --flags of a doc's code spans that start with one. Single-dash
// words are left alone: in these docs they are errnos (-EINVAL) and go tool flags (-race).
func FlagMentions(d *Doc) []FlagMention {
	var out []FlagMention
	for _, c := range d.Code {
		if c.Block || !strings.HasPrefix(strings.TrimSpace(c.Text), "--") {
			continue
		}
		for _, w := range strings.FieldsFunc(c.Text, func(r rune) bool { return r == ' ' || r == '|' || r == ',' || r == '=' }) {
			if !strings.HasPrefix(w, "--") {
				continue
			}
			name := strings.TrimPrefix(w, "--")
			if name == "" || name[0] >= '0' && name[0] <= '9' {
				continue
			}
			out = append(out, FlagMention{File: d.Path, Line: c.Line, Name: strings.Trim(name, ".:;()[]"), Text: c.Text})
		}
	}
	return out
}

// MatchFlag says whether a mentioned flag names flags that exist: a plain name must be
// one; "prefix-*" must match one; "a-min/max-b" must name both a-min-b and a-max-b.
func MatchFlag(pattern string, flags map[string]bool) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		for f := range flags {
			if strings.HasPrefix(f, prefix) {
				return true
			}
		}
		return false
	}
	left, right, ok := strings.Cut(pattern, "/")
	if !ok {
		return flags[pattern]
	}
	// left ends in the first alternative word, right starts with the second: the head
	// of left and the tail of right are shared.
	head := left[:strings.LastIndex(left, "-")+1]
	tail := ""
	if i := strings.Index(right, "-"); i >= 0 {
		tail = right[i:]
	}
	return flags[left+tail] && flags[head+right]
}
