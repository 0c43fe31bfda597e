package doccheck

import (
	"strings"
	"testing"
)

// Parse and the readers over its result never panic, whatever the Markdown (unclosed
// fences, spans and substitutions, stray quotes and brackets), and every line they
// report lies in the input.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"# h\n\n`unclosed",
		"```\nringlogd --data d \\\n",
		"x `ringlog topic\ncreate --partitions 3` y\n[a](b.md#c)\n",
		"`ringlog consume t --from \"@$(date -d 'x'`",
		"`ringlogd $($($(`",
		"Two\nlines\n===\n- item\n---\n| `a\\|b` | c |\n",
		"`--group-min/max-x` `--q-*` `-- ` `---`",
		"[r]: <x.md>\n<a name=\"n\" href=\"#n\">",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		d := Parse("f.md", []byte(src))
		lines := strings.Count(src, "\n") + 1
		for _, l := range d.Links {
			if l.Line < 1 || l.Line > lines {
				t.Fatalf("link on line %d of %d", l.Line, lines)
			}
		}
		for _, c := range Commands(d, "ringlog", "ringlogd") {
			if c.Line < 1 || c.Line > lines {
				t.Fatalf("command on line %d of %d", c.Line, lines)
			}
			CheckCommands([]Command{c}, CLI{Binary: c.Binary, Commands: map[string]bool{"topic": true},
				Subcommands: map[string][]string{"topic": {"create"}}}, nil)
		}
		for _, m := range FlagMentions(d) {
			MatchFlag(m.Name, map[string]bool{"a": true})
		}
		HeadingText(src)
	})
}
