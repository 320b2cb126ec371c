//go:build unix

package e2e

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeCmd is one command of README.md's examples, as a user would type it.
type readmeCmd struct {
	Line    int    // the README.md line it starts on
	Section string // "## Submitting jobs / ### Reaching a running job"
	Block   int    // which code block (counted over the whole file)
	// Text is the command with its `$ ` prompt and `# comment` dropped and
	// its `\` continuation lines joined by a space (a quoted string that
	// spans lines keeps its newlines).
	Text string
	// Comment is the `# comment` on its line, without the #.
	Comment string
	// Assign: Text is a shell assignment (API=…) that the block's later
	// commands rely on.
	Assign bool
	// Output is what the README shows the command printing (the lines
	// after a `$ ` command in its block), with the block's indentation
	// removed.
	Output []string
}

func (c readmeCmd) String() string { return fmt.Sprintf("README.md:%d: %s", c.Line, c.Text) }

var (
	assignPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	// a program the README's examples run: gpumesh or curl, first or
	// after a pipe
	commandPattern = regexp.MustCompile(`^(sudo )?(gpumesh|curl)( |$)`)
	pipedPattern   = regexp.MustCompile(`\|\s*(sudo )?(gpumesh|curl) `)
)

// readmeCommands returns the commands in the code blocks (fenced, or
// indented by 4 spaces) under the level-2 headings named by sections
// (with their subsections): each line that runs gpumesh or curl, and the
// shell assignments (API=…) of the blocks. In an indented block with `$ `
// prompts only the prompted lines are commands, and the lines after each
// are its output.
func readmeCommands(src string, sections ...string) ([]readmeCmd, error) {
	lines := strings.Split(src, "\n")
	var (
		out     []readmeCmd
		h2, h3  string
		inScope bool
		block   int
	)
	section := func() string {
		if h3 == "" {
			return "## " + h2
		}
		return "## " + h2 + " / ### " + h3
	}
	blank := func(i int) bool { return strings.TrimSpace(lines[i]) == "" }
	indentedCode := func(i int) bool { return strings.HasPrefix(lines[i], "    ") && !blank(i) }
	// take adds a complete logical line of a block, when it is a command
	// or an assignment.
	take := func(start int, text, comment string) *readmeCmd {
		text = strings.TrimSpace(text)
		text = strings.TrimSpace(strings.TrimPrefix(text, "$ "))
		text = joinContinuations(text)
		c := readmeCmd{Line: start + 1, Section: section(), Block: block, Text: text,
			Comment: strings.TrimSpace(strings.TrimPrefix(comment, "#"))}
		switch {
		case commandPattern.MatchString(text) || pipedPattern.MatchString(text):
		case assignPattern.MatchString(text) && (!strings.ContainsAny(text, " \t") || shellQuotedAssign(text)):
			c.Assign = true
		default:
			return nil
		}
		out = append(out, c)
		return &out[len(out)-1]
	}
	// logical gathers one shell line starting at lines[i] (its comment
	// cut, continued while it ends in `\` or a quote is open) within the
	// lines up to last; it returns the text, its comment and the index of
	// its last line.
	logical := func(i, last int, strip func(string) string) (string, string, int, error) {
		text := strip(lines[i])
		for {
			cut, open := shellScan(text)
			if cut >= 0 {
				return text[:cut], text[cut:], i, nil
			}
			if !open && !strings.HasSuffix(text, `\`) {
				return text, "", i, nil
			}
			if i+1 > last {
				return "", "", i, fmt.Errorf("README.md:%d: a command continues past the end of its block", i+1)
			}
			i++
			text += "\n" + strip(lines[i])
		}
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "```"):
			end := i + 1
			for end < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
				end++
			}
			if end == len(lines) {
				return nil, fmt.Errorf("README.md:%d: a code block is never closed", i+1)
			}
			block++
			for j := i + 1; inScope && j < end; j++ {
				text, comment, last, err := logical(j, end-1, func(s string) string { return s })
				if err != nil {
					return nil, err
				}
				take(j, text, comment)
				j = last
			}
			i = end
		case strings.HasPrefix(l, "## "):
			h2, h3 = strings.TrimSpace(l[3:]), ""
			inScope = slices.Contains(sections, h2)
		case strings.HasPrefix(l, "### "):
			h3 = strings.TrimSpace(l[4:])
		case inScope && indentedCode(i) && (i == 0 || blank(i-1)):
			// An indented block: it goes on over blank lines while
			// indented lines follow them.
			last := i
			for j := i + 1; j < len(lines) && (indentedCode(j) || (blank(j) && j+1 < len(lines) && indentedCode(j+1))); j++ {
				last = j
			}
			block++
			if err := indentedBlock(lines, i, last, logical, take); err != nil {
				return nil, err
			}
			i = last
		}
	}
	return out, nil
}

// indentedBlock takes the commands of lines[first..last], an indented
// code block: its `$ ` lines, and the lines after each as its output; or,
// in a block without prompts, its gpumesh and curl lines.
func indentedBlock(lines []string, first, last int,
	logical func(i, last int, strip func(string) string) (string, string, int, error),
	take func(start int, text, comment string) *readmeCmd) error {
	indent := len(lines[first]) - len(strings.TrimLeft(lines[first], " "))
	strip := func(s string) string {
		if len(s) >= indent && strings.TrimSpace(s[:indent]) == "" {
			return s[indent:]
		}
		return strings.TrimLeft(s, " ")
	}
	prompted := false
	for i := first; i <= last; i++ {
		if strings.HasPrefix(strip(lines[i]), "$ ") {
			prompted = true
		}
	}
	var cur *readmeCmd
	for i := first; i <= last; i++ {
		s := strip(lines[i])
		if prompted && !strings.HasPrefix(s, "$ ") {
			if cur != nil && strings.TrimSpace(s) != "" {
				cur.Output = append(cur.Output, s)
			}
			continue
		}
		text, comment, end, err := logical(i, last, strip)
		if err != nil {
			return err
		}
		cur = take(i, text, comment)
		i = end
	}
	return nil
}

// joinContinuations replaces each `\` at the end of a line, with the next
// line's indentation, by one space, as the shell reads it.
func joinContinuations(s string) string {
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			l = strings.TrimLeft(l, " \t")
		}
		if i < len(lines)-1 && strings.HasSuffix(l, `\`) {
			b.WriteString(strings.TrimRight(strings.TrimSuffix(l, `\`), " \t"))
			b.WriteString(" ")
			continue
		}
		b.WriteString(l)
		if i < len(lines)-1 {
			b.WriteString("\n")
		}
	}
	return strings.TrimSpace(b.String())
}

// shellQuotedAssign tells whether s is one assignment whose value is a
// single quoted word (AUTH="Authorization: Bearer …").
func shellQuotedAssign(s string) bool {
	eq := strings.IndexByte(s, '=')
	v := s[eq+1:]
	if len(v) < 2 || (v[0] != '"' && v[0] != '\'') || v[len(v)-1] != v[0] {
		return false
	}
	_, open := shellScan(v[:len(v)-1])
	return open
}

// shellScan reads s as sh does: cut is where an unquoted comment starts
// (-1: none), and open tells whether a quote is still open at its end.
func shellScan(s string) (cut int, open bool) {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '\\':
			i++ // the next byte is taken literally (inside "…" too)
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || strings.ContainsRune(" \t\n;|&", rune(s[i-1]))):
			return i, false
		}
	}
	return -1, quote != 0
}

func TestReadmeCommandsParse(t *testing.T) {
	src := strings.Join([]string{
		"# title",
		"## Elsewhere",
		"```sh",
		"gpumesh elsewhere",
		"```",
		"## Wanted",
		"```sh",
		"# a comment line",
		"gpumesh submit --gpus 8 \\",
		"    --name x --wait -- \\",
		"    sh -c 'torchrun a \\",
		"           b'",
		"gpumesh jobs      # yours # and more",
		"API=http://127.0.0.1:7070",
		`AUTH="Authorization: Bearer $(cat owner.token)"`,
		`curl -s -X POST $API/v1/jobs -d '{`,
		`  "id": "x#1"}'`,
		"tar -czf - . | curl -s --data-binary @- $API/v1/payloads",
		"echo not a command",
		"```",
		"",
		"```toml",
		`data = "/var/lib/gpumesh"`,
		"```",
		"### Sub",
		"Prose, then an indented block:",
		"",
		"    $ sudo gpumesh doctor --join A",
		"    OK    privileges",
		"    13 checks",
		"    $ gpumesh exec -it J -- bash   # a terminal",
		"",
		"- a list item",
		"  continued",
		"",
		"      ==> share 0 <==",
		"      step 1",
		"",
		"    gpumesh: an error message, not a command",
		"    gpumesh status --json",
		"## After",
		"    $ gpumesh after",
	}, "\n")
	got, err := readmeCommands(src, "Wanted")
	if err != nil {
		t.Fatal(err)
	}
	type cmd struct {
		Line    int
		Section string
		Text    string
		Comment string
		Assign  bool
		Output  []string
	}
	var have []cmd
	for _, c := range got {
		have = append(have, cmd{c.Line, c.Section, c.Text, c.Comment, c.Assign, c.Output})
	}
	want := []cmd{
		{9, "## Wanted", "gpumesh submit --gpus 8 --name x --wait -- sh -c 'torchrun a b'", "", false, nil},
		{13, "## Wanted", "gpumesh jobs", "yours # and more", false, nil},
		{14, "## Wanted", "API=http://127.0.0.1:7070", "", true, nil},
		{15, "## Wanted", `AUTH="Authorization: Bearer $(cat owner.token)"`, "", true, nil},
		{16, "## Wanted", "curl -s -X POST $API/v1/jobs -d '{\n\"id\": \"x#1\"}'", "", false, nil},
		{18, "## Wanted", "tar -czf - . | curl -s --data-binary @- $API/v1/payloads", "", false, nil},
		{28, "## Wanted / ### Sub", "sudo gpumesh doctor --join A", "", false, []string{"OK    privileges", "13 checks"}},
		{31, "## Wanted / ### Sub", "gpumesh exec -it J -- bash", "a terminal", false, nil},
		{40, "## Wanted / ### Sub", "gpumesh status --json", "", false, nil},
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("got\n%#v\nwant\n%#v", have, want)
	}
	if _, err := readmeCommands("## Wanted\n```sh\ngpumesh submit \\\n```\n", "Wanted"); err == nil {
		t.Error("a continuation past the end of its block is taken")
	}
	if _, err := readmeCommands("## Wanted\n```sh\ngpumesh submit\n", "Wanted"); err == nil {
		t.Error("an unclosed block is taken")
	}
}
