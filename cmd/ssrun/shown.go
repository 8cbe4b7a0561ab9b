package main

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// shown is how the CLI prints text that comes from outside ssrun: client
// ids, keys, values, file names, and errors of rules and servers. Valid
// UTF-8 of printable characters (strconv.IsPrint: letters, marks, numbers,
// punctuation, symbols and the ASCII space) is printed as it is; anything
// else is quoted and escaped as Go quotes strings (strconv.Quote), so that
// no escape sequence, carriage return, newline or invalid byte in it
// reaches the terminal: it cannot clear the screen, retitle the window or
// forge a line of the output.
func shown(s string) string {
	for _, r := range s { // an invalid byte comes as utf8.RuneError
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// shownAll is shown of each of ss, joined by sep.
func shownAll(ss []string, sep string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = shown(s)
	}
	return strings.Join(out, sep)
}
