package doccheck

import (
	"regexp"
	"strings"
)

// Table is one pipe table of a Markdown file (GitHub's extension), outside fenced code.
// Tests compare the tables the docs show (error codes, API keys, metrics, topic configs)
// with the code's own tables.
type Table struct {
	Heading string   // text of the nearest heading above it (HeadingText), "" before any
	Line    int      // 1-based line of its header row
	Header  []string // header cells, trimmed
	Rows    []Row
}

// Row is one body row of a table. Cells are trimmed, with `\|` read as `|`; a row with
// fewer cells than the header is padded with "", extra cells are kept.
type Row struct {
	Line  int
	Cells []string
}

// Cell returns the row's cell under the header named column, or "" when the table has no
// such column.
func (t Table) Cell(r Row, column string) string {
	for i, h := range t.Header {
		if h == column && i < len(r.Cells) {
			return r.Cells[i]
		}
	}
	return ""
}

var delimiterRow = regexp.MustCompile(`^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$`)

// Tables returns the pipe tables of a Markdown file, in order. A table is a row of cells
// followed by a delimiter row (|---|:--:|), then every following line that starts with |.
func Tables(src []byte) []Table {
	lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	var tables []Table
	heading, fence := "", ""
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if fence != "" {
			trimmed := strings.TrimLeft(line, " \t")
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil && !(m[1][0] == '`' && strings.Contains(m[2], "`")) {
			fence = m[1]
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			heading = HeadingText(m[2])
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || i+1 >= len(lines) || !delimiterRow.MatchString(lines[i+1]) {
			continue
		}
		t := Table{Heading: heading, Line: i + 1, Header: tableCells(line)}
		i += 2
		for ; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			cells := tableCells(lines[i])
			for len(cells) < len(t.Header) {
				cells = append(cells, "")
			}
			t.Rows = append(t.Rows, Row{Line: i + 1, Cells: cells})
		}
		i-- // the line that ended the table may start something else
		tables = append(tables, t)
	}
	return tables
}

// tableCells splits a table row at the pipes that are not escaped (`\|`, also inside code
// spans, as GitHub reads them).
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var cells []string
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			b.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}

// CodeSpans returns the contents of the code spans in text (a cell, a line of prose), in
// order.
func CodeSpans(text string) []string {
	_, spans := splitCodeSpans(text)
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.text
	}
	return out
}

// TablesUnder returns the tables of the file at rel (relative to root) whose heading is
// heading and whose header row is exactly header.
func TablesUnder(tree *Tree, rel, heading string, header ...string) ([]Table, error) {
	src, err := tree.source(rel)
	if err != nil {
		return nil, err
	}
	var out []Table
	for _, t := range Tables(src) {
		if t.Heading == heading && strings.Join(t.Header, "\x00") == strings.Join(header, "\x00") {
			out = append(out, t)
		}
	}
	return out, nil
}
