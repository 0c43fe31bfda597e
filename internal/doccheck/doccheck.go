// Package doccheck reads the project's Markdown (README.md and docs/**/*.md) as GitHub
// renders it, far enough to check that the docs claim no more than exists: every relative
// link's file exists, every #anchor names a heading of its file (GitHub's slug rule,
// Slugger), every `ringlog ...` / `ringlogd ...` command line the docs show can be compared
// with the binaries' flag sets (Commands), and the pipe tables the docs hold (Tables: error
// codes, API keys, metrics, topic configs, flag defaults) can be compared with the code's.
//
// It owns the reading, not the truth: it knows no flag, metric or error code. The packages
// that own them compare in their own docs tests: cmd/ringlog and cmd/ringlogd
// (docflags_test.go; their flag sets live in package main, which nothing can import),
// netio/wire, netio/kafka, netio/admin and engine/shard (docs_test.go). This package's test
// checks the links and anchors of the real tree and that every test the docs name exists.
// Only tests import it; it reads files and never writes.
//
// What it reads (CommonMark as GitHub extends it, the subset these docs use): ATX and setext
// headings, fenced code blocks (``` and ~~~, any indentation), code spans, inline links and
// images `[text](dest "title")`, reference definitions `[label]: dest`, HTML href/src, HTML
// anchors `<a name="x">` / `id="x"`, and pipe tables. Indented code blocks are read as text
// (the docs indent list continuations, not code).
package doccheck

import (
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/ringlog/ringlog/internal/textdist"
)

// docBytesMax bounds one Markdown file read into memory: the largest doc
// (docs/benchmarks.md) is about 500 KiB.
const docBytesMax = 8 << 20

// Problem is one false claim: a broken link or anchor, a flag or subcommand that does not
// exist. Line is 1-based.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Link is one link destination as written, outside code.
type Link struct {
	Line int
	Dest string
}

// Code is the text of one code span or one logical line of a fenced code block (shell
// continuation lines joined), with the line it starts on.
type Code struct {
	Line  int
	Text  string
	Block bool // from a fenced block, not a code span
}

// Doc is one parsed Markdown file.
type Doc struct {
	Path    string          // slash-separated, relative to the root it was read from
	Anchors map[string]bool // heading slugs (with GitHub's -1, -2 suffixes) and HTML ids
	Links   []Link
	Code    []Code
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	fenceOpen  = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})(.*)$")
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	// inlineLink matches the `](dest` part of [text](dest "title") and ![alt](dest).
	inlineLink = regexp.MustCompile(`\]\([ \t]*(<[^>]*>|[^)\s]+)`)
	htmlRef    = regexp.MustCompile(`(?i)\b(?:href|src)[ \t]*=[ \t]*"([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`(?i)<[a-z][^>]*\b(?:id|name)[ \t]*=[ \t]*"([^"]*)"`)
	listMarker = regexp.MustCompile(`^ {0,3}([-*+]|\d{1,9}[.)])([ \t]|$)`)
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)
)

// Parse reads one Markdown file's headings, links and code. path names it in problems.
func Parse(path string, src []byte) *Doc {
	p := parser{d: &Doc{Path: path, Anchors: map[string]bool{}}}
	for i, line := range strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n") {
		p.line(i+1, line)
	}
	p.flush()
	return p.d
}

// parser reads a Markdown file line by line, inline content a paragraph at a time (code
// spans may run over line breaks).
type parser struct {
	d           *Doc
	slugs       Slugger
	fence       string   // the opening fence while inside a fenced block
	pending     string   // a fenced line ending in `\`, waiting for its continuation
	pendingLine int      // where pending started
	paragraph   []string // the lines of the paragraph being read
	start       int      // the paragraph's first line
	setextOK    bool     // an underline below the paragraph makes it a heading
}

func (p *parser) line(n int, line string) {
	if p.fence != "" {
		p.fenced(n, line)
		return
	}
	trimmed := strings.TrimSpace(line)
	if m := fenceOpen.FindStringSubmatch(line); m != nil && !(m[1][0] == '`' && strings.Contains(m[2], "`")) {
		p.flush()
		p.fence = m[1]
		return
	}
	if m := atxHeading.FindStringSubmatch(line); m != nil {
		p.flush()
		p.d.Anchors[p.slugs.Slug(HeadingText(m[2]))] = true
		p.d.scanInline(n, line)
		return
	}
	if setextLine.MatchString(line) && len(p.paragraph) > 0 && p.setextOK {
		text := strings.Join(p.paragraph, " ")
		p.flush()
		p.d.Anchors[p.slugs.Slug(HeadingText(text))] = true
		return
	}
	switch {
	case trimmed == "":
		p.flush()
	case strings.HasPrefix(trimmed, "|"): // a table row: cells do not continue on the next row
		p.flush()
		p.d.scanInline(n, line)
	case listMarker.MatchString(line), strings.HasPrefix(trimmed, ">"), strings.HasPrefix(trimmed, "<"):
		// A new item, quote or HTML block starts a paragraph that a `---` below does not
		// turn into a heading (it is a rule).
		p.flush()
		p.paragraph, p.start, p.setextOK = []string{line}, n, false
	default:
		if len(p.paragraph) == 0 {
			p.start, p.setextOK = n, true
		}
		p.paragraph = append(p.paragraph, line)
	}
}

func (p *parser) fenced(n int, line string) {
	trimmed := strings.TrimLeft(line, " \t")
	if strings.HasPrefix(trimmed, p.fence) && strings.Trim(trimmed, p.fence[:1]+" \t") == "" {
		p.fence, p.pending = "", ""
		return
	}
	if p.pending == "" {
		p.pendingLine = n
	}
	if cont, ok := strings.CutSuffix(line, `\`); ok {
		p.pending += cont + " "
		return
	}
	p.d.Code = append(p.d.Code, Code{Line: p.pendingLine, Text: p.pending + line, Block: true})
	p.pending = ""
}

func (p *parser) flush() {
	if len(p.paragraph) > 0 {
		p.d.scanInline(p.start, strings.Join(p.paragraph, "\n"))
	}
	p.paragraph = nil
}

// scanInline records the code spans, links and HTML anchors of text, whose first line is
// line n.
func (d *Doc) scanInline(n int, text string) {
	text, spans := splitCodeSpans(text)
	for _, s := range spans {
		d.Code = append(d.Code, Code{Line: n + s.line, Text: s.text})
	}
	lineOf := func(offset int) int { return n + strings.Count(text[:offset], "\n") }
	for _, m := range refDef.FindAllStringSubmatchIndex(text, -1) {
		d.Links = append(d.Links, Link{Line: lineOf(m[0]), Dest: strings.Trim(text[m[2]:m[3]], "<>")})
	}
	for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
		d.Links = append(d.Links, Link{Line: lineOf(m[0]), Dest: strings.Trim(text[m[2]:m[3]], "<>")})
	}
	for _, m := range htmlRef.FindAllStringSubmatchIndex(text, -1) {
		d.Links = append(d.Links, Link{Line: lineOf(m[0]), Dest: html.UnescapeString(text[m[2]:m[3]])})
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
		d.Anchors[html.UnescapeString(m[1])] = true
	}
}

// codeSpan is a code span's content (line breaks read as spaces) and the line it starts
// on, counted from the text's first.
type codeSpan struct {
	text string
	line int
}

// splitCodeSpans returns text with each code span replaced by a NUL (and the line breaks
// it held, so that lines still count), and the spans. A span opens with a run of
// backticks and closes with the next run of the same length (CommonMark); an unclosed run
// is literal text.
func splitCodeSpans(text string) (string, []codeSpan) {
	var b strings.Builder
	var spans []codeSpan
	for i := 0; i < len(text); {
		if text[i] == '\\' && i+1 < len(text) && text[i+1] == '`' {
			b.WriteString(text[i : i+2])
			i += 2
			continue
		}
		if text[i] != '`' {
			b.WriteByte(text[i])
			i++
			continue
		}
		run := i
		for i < len(text) && text[i] == '`' {
			i++
		}
		width := i - run
		closeAt := -1
		for j := i; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			k := j
			for k < len(text) && text[k] == '`' {
				k++
			}
			if k-j == width {
				closeAt = j
				break
			}
			j = k
		}
		if closeAt < 0 {
			b.WriteString(text[run:i])
			continue
		}
		raw := text[i:closeAt]
		content := strings.ReplaceAll(raw, "\n", " ")
		if len(content) > 2 && content[0] == ' ' && content[len(content)-1] == ' ' && strings.Trim(content, " ") != "" {
			content = content[1 : len(content)-1]
		}
		spans = append(spans, codeSpan{text: content, line: strings.Count(text[:run], "\n")})
		b.WriteString("\x00" + strings.Repeat("\n", strings.Count(raw, "\n")))
		i = closeAt + width
	}
	return b.String(), spans
}

var (
	inlineLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	refLinkText    = regexp.MustCompile(`!?\[([^\]]*)\]\[[^\]]*\]`)
	htmlTag        = regexp.MustCompile(`</?[A-Za-z][^>]*>`)
	// Emphasis with _ : a run of one or two underscores that opens at the start of a word
	// and closes at the end of one. Intraword underscores (snake_case) are literal, as in
	// CommonMark. Every unescaped * goes: emphasis or literal, the slug drops it anyway.
	starEmphasis       = regexp.MustCompile(`(^|[^\\])\*+`)
	underscoreEmphasis = regexp.MustCompile(`(^|[^\p{L}\p{N}_])(__?)([^_\s](?:[^_]*[^_\s])?)(__?)($|[^\p{L}\p{N}_])`)
	backslashEscape    = regexp.MustCompile("\\\\([!-/:-@\\[-`{-~])")
)

// HeadingText is the text GitHub reads a heading's anchor from: the rendered text, so
// code spans keep their content without backticks, links keep their text, HTML tags and
// emphasis markers go, and entities and backslash escapes are decoded.
func HeadingText(raw string) string {
	text, spans := splitCodeSpans(raw)
	text = inlineLinkText.ReplaceAllString(text, "$1")
	text = refLinkText.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = starEmphasis.ReplaceAllString(text, "$1")
	for {
		next := underscoreEmphasis.ReplaceAllStringFunc(text, func(m string) string {
			g := underscoreEmphasis.FindStringSubmatch(m)
			if g[2] != g[4] {
				return m
			}
			return g[1] + g[3] + g[5]
		})
		if next == text {
			break
		}
		text = next
	}
	text = backslashEscape.ReplaceAllString(text, "$1")
	text = html.UnescapeString(text)
	for _, s := range spans { // put the spans' contents back in order
		text = strings.Replace(text, "\x00", s.text, 1)
	}
	return strings.TrimSpace(text)
}

// Slugger gives a document's headings their anchors as GitHub does, duplicates included.
// The rule is github-slugger's (github.com/Flet/github-slugger, index.js and
// script/generate-regex.mjs; its test/fixtures.json is generated from headings rendered
// on github.com), which reproduces GitHub's own (html-pipeline's TableOfContentsFilter:
// downcase, drop /[^\p{Word}\- ]/, ' ' to '-'):
//
//   - lower-case the text;
//   - drop every character in the Unicode categories Other_Number, Open/Close/Initial/
//     Final/Other_Punctuation, Dash_Punctuation except '-', every Symbol, Control,
//     Private_Use, Format, Unassigned and Separator except ' ' — unless it is alphabetic;
//     so ':' '–' '—' '(' ')' '/' '.' ',' '`' '&' '+' '→' '×' '~' all vanish, while '_',
//     letters, digits and marks stay;
//   - turn each ' ' into '-' (no collapsing: "a – b" is "a--b", "a: b" is "a-b");
//   - a slug already taken gets "-1", then "-2", ... (counted per original slug, and a
//     suffixed slug that is itself taken moves on to the next number).
type Slugger struct {
	occurrences map[string]int
}

// Slug returns the anchor of the next heading with this text.
func (s *Slugger) Slug(text string) string {
	if s.occurrences == nil {
		s.occurrences = map[string]int{}
	}
	base := Slug(text)
	slug := base
	for {
		if _, taken := s.occurrences[slug]; !taken {
			break
		}
		s.occurrences[base]++
		slug = fmt.Sprintf("%s-%d", base, s.occurrences[base])
	}
	s.occurrences[slug] = 0
	return slug
}

// Slug is GitHub's anchor for a heading's text, without the duplicate suffix.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-':
			b.WriteRune(r)
		case dropped(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// dropped says whether the slug removes r (github-slugger's generated regex).
func dropped(r rune) bool {
	if unicode.In(r, unicode.L, unicode.Other_Alphabetic) {
		return false
	}
	if unicode.In(r, unicode.No, unicode.Ps, unicode.Pe, unicode.Pi, unicode.Pf, unicode.Po, unicode.Pd,
		unicode.S, unicode.Cc, unicode.Co, unicode.Cf, unicode.Z) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C) // unassigned
}

// Files lists the docs this package checks under root: README.md and docs/**/*.md, as
// slash-separated paths relative to root, sorted.
func Files(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == filepath.Join(root, "docs") {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files[1:])
	return files, err
}

// RecordsFile holds measurements of past runs, which name the tests, metrics and codes of
// their day: the checks that the docs name only what exists now pass over it.
const RecordsFile = "docs/benchmarks.md"

// CurrentDocLines calls fn with the lines of each file Files lists under root, in order,
// except RecordsFile and the files in skip (slash-separated paths relative to root). It stops
// at the first file it cannot list or read.
func CurrentDocLines(root string, skip []string, fn func(file string, lines []string)) error {
	files, err := Files(root)
	if err != nil {
		return err
	}
	tree := NewTree(root)
	for _, f := range files {
		if f == RecordsFile || slices.Contains(skip, f) {
			continue
		}
		src, err := tree.source(f)
		if err != nil {
			return err
		}
		fn(f, strings.Split(string(src), "\n"))
	}
	return nil
}

// Tree is a set of parsed docs under one root, read on demand.
type Tree struct {
	Root string
	docs map[string]*Doc
}

// NewTree reads Markdown files under root as they are asked for.
func NewTree(root string) *Tree { return &Tree{Root: root, docs: map[string]*Doc{}} }

// Doc returns the parsed file at rel (slash-separated, relative to the root).
func (t *Tree) Doc(rel string) (*Doc, error) {
	if d, ok := t.docs[rel]; ok {
		return d, nil
	}
	src, err := t.source(rel)
	if err != nil {
		return nil, err
	}
	d := Parse(rel, src)
	t.docs[rel] = d
	return d, nil
}

// source reads the file at rel, at most docBytesMax bytes of it.
func (t *Tree) source(rel string) ([]byte, error) {
	f, err := os.Open(filepath.Join(t.Root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, docBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	if len(src) > docBytesMax {
		return nil, fmt.Errorf("%s: larger than %d bytes", rel, docBytesMax)
	}
	return src, nil
}

// CheckLinks checks every link of the files (paths relative to the tree's root): a
// relative destination must name a file or directory inside the root, and a #fragment must
// be an anchor of its Markdown file (an #L12 or #L12-L20 line anchor of any other file).
// Links with a scheme (https:, mailto:) and protocol-relative ones are not checked: the
// tests run without a network.
func (t *Tree) CheckLinks(files []string) ([]Problem, error) {
	var problems []Problem
	for _, rel := range files {
		d, err := t.Doc(rel)
		if err != nil {
			return nil, err
		}
		for _, l := range d.Links {
			if msg := t.checkLink(d, l.Dest); msg != "" {
				problems = append(problems, Problem{File: rel, Line: l.Line, Msg: msg})
			}
		}
	}
	return problems, nil
}

func (t *Tree) checkLink(from *Doc, dest string) string {
	if dest == "" || scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	target, fragment, _ := strings.Cut(dest, "#")
	target, _, _ = strings.Cut(target, "?")
	decoded, err := url.PathUnescape(target)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	rel := from.Path
	if decoded != "" {
		if strings.HasPrefix(decoded, "/") {
			rel = path.Clean(strings.TrimPrefix(decoded, "/"))
		} else {
			rel = path.Join(path.Dir(from.Path), decoded)
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Sprintf("link %q leaves the repository", dest)
		}
		info, err := os.Stat(filepath.Join(t.Root, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Sprintf("link %q: no file %s", dest, rel)
		}
		if info.IsDir() {
			if fragment != "" {
				return fmt.Sprintf("link %q: a #fragment on a directory", dest)
			}
			return ""
		}
	}
	if fragment == "" {
		return ""
	}
	anchor, err := url.PathUnescape(fragment)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	if !strings.HasSuffix(rel, ".md") {
		if lineAnchor.MatchString(anchor) {
			return ""
		}
		return fmt.Sprintf("link %q: %s is not Markdown, so it has no anchor %q", dest, rel, anchor)
	}
	target2, err := t.Doc(rel)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	if !target2.Anchors[anchor] {
		return fmt.Sprintf("link %q: %s has no heading with anchor #%s%s", dest, rel, anchor, nearest(anchor, target2.Anchors))
	}
	return ""
}

// nearest suggests the anchor closest to a missing one, for the problem's message.
func nearest(anchor string, anchors map[string]bool) string {
	names := make([]string, 0, len(anchors))
	for a := range anchors {
		names = append(names, a)
	}
	best := textdist.Nearest(anchor, names, len(anchor)/2)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean #%s?)", best)
}
