package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docPages are the pages whose `kubectl lpu …` examples must parse, from
// this package's directory.
var docPages = []string{"../../README.md", "../../deploy/README.md", "../../deploy/helm/lpu-node/templates/NOTES.txt", "../../docs/*.md", "../../docs/*/*.md"}

// kubectlLPU finds an example: `kubectl lpu` and the rest of its code span
// or line.
var kubectlLPU = regexp.MustCompile("kubectl lpu( [^`\n]*)?")

// TestDocsExamplesParse: every `kubectl lpu …` example in the README, the
// deploy README, the chart's NOTES and docs/ names a command of the
// plugin's tree, with flags it has and arguments it accepts. Nothing is
// run: a cluster is not needed to catch `kubectl lpu nodes NODE` failing
// with unknown command "NODE".
func TestDocsExamplesParse(t *testing.T) {
	n := 0
	for _, glob := range docPages {
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v (no files)", glob, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range kubectlLPU.FindAllStringSubmatch(string(b), -1) {
				args := exampleArgs(m[1])
				if args == nil {
					continue // prose: "kubectl lpu …" or "kubectl lpu itself"
				}
				n++
				if err := parseArgs(args); err != nil {
					t.Errorf("%s: kubectl lpu %s: %v", f, strings.Join(args, " "), err)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d kubectl lpu examples", n)
	}
}

// TestDocsExamplesParseCatchesErrors: the check above refuses what the
// plugin refuses.
func TestDocsExamplesParseCatchesErrors(t *testing.T) {
	for _, args := range [][]string{{"nodes", "a", "b"}, {"node"}, {"pods", "--no-such-flag"}, {"version", "extra"}} {
		if err := parseArgs(args); err == nil {
			t.Errorf("kubectl lpu %s parses", strings.Join(args, " "))
		}
	}
}

// exampleArgs splits what follows `kubectl lpu` into words as a shell
// would (quotes removed), up to a pipe, a comment or the end of the
// command; nil when the text is prose rather than a command.
func exampleArgs(rest string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range rest {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case (r == '|' || r == '#' || r == ';' || r == '&' || r == ')') && !inWord:
			return commandOrNil(words)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return commandOrNil(words)
}

// commandOrNil keeps words that start with one of the plugin's commands
// or a flag.
func commandOrNil(words []string) []string {
	if len(words) == 0 {
		return nil
	}
	switch w := words[0]; {
	case w == "nodes", w == "pods", w == "cordon", w == "uncordon", w == "version", w == "completion", strings.HasPrefix(w, "-"):
		return words
	}
	return nil
}

// parseArgs finds the command args name in the plugin's tree and parses
// its flags and arguments as Execute would, without running it.
func parseArgs(args []string) error {
	root := newRoot(io.Discard, io.Discard)
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}
