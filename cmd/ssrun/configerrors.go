package main

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML decoder reports mistakes in Go's terms ("field wirte not found
// in type main.ruleSettings", "cannot unmarshal !!str `lots` into int").
// yamlErrors says them in the file's terms instead: the setting's section,
// the settings it accepts, and what a value should look like.

// configSections are the types of ssrun.yaml's sections, by Go name, with
// how to name them to a user.
var configSections = map[string]struct {
	t    reflect.Type
	name string
}{
	"main.fileConfig":     {reflect.TypeFor[fileConfig](), "at the top level"},
	"main.ruleSettings":   {reflect.TypeFor[ruleSettings](), "in defaults: or a rule's settings"},
	"main.connSettings":   {reflect.TypeFor[connSettings](), "under broker:"},
	"main.pluginSettings": {reflect.TypeFor[pluginSettings](), "in a plugin's settings"},
	"main.canarySettings": {reflect.TypeFor[canarySettings](), "under canary:"},
}

// valueKinds says what a value of each Go type looks like in the file.
var valueKinds = map[string]string{
	"int":                            "a whole number",
	"uint16":                         "a whole number from 0 to 65535",
	"uint32":                         "a whole number from 0 to 4294967295",
	"bool":                           "true or false",
	"string":                         "a string",
	"[]string":                       "a list of key patterns, e.g. [\"sensors/**\"]",
	"map[string]main.ruleSettings":   "a map from rule file names (or globs) to their settings",
	"map[string]main.pluginSettings": "a map from plugin names to their settings (path, sha256)",
	"main.fileConfig":                "a map of settings",
	"main.ruleSettings":              "a map of settings (timeout, memory, read, ...)",
	"main.connSettings":              "a map of settings (hostname, tcp_port, ...)",
	"main.pluginSettings":            "a map of settings (path, sha256)",
}

var (
	unknownField = regexp.MustCompile(`^(line \d+): field (.+) not found in type (\S+)$`)
	badValue     = regexp.MustCompile("^(line \\d+): cannot unmarshal !!\\w+ (?:`(.*)` )?into (.+)$")
)

// yamlErrors rewrites a decoding error of ssrun.yaml in the file's terms;
// other errors are returned as they are.
func yamlErrors(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	lines := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		lines[i] = yamlError(e)
	}
	return errors.New(strings.Join(lines, "; "))
}

func yamlError(msg string) string {
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		if s, ok := configSections[m[3]]; ok {
			return fmt.Sprintf("%s: unknown setting %q %s (want one of %s)", m[1], m[2], s.name, strings.Join(yamlKeys(s.t), ", "))
		}
	}
	if m := badValue.FindStringSubmatch(msg); m != nil {
		kind, ok := valueKinds[strings.TrimPrefix(m[3], "*")]
		if !ok {
			return msg
		}
		if m[2] == "" {
			return fmt.Sprintf("%s: want %s", m[1], kind)
		}
		return fmt.Sprintf("%s: %q is not %s", m[1], m[2], kind)
	}
	return msg
}

// yamlKeys lists the YAML names of t's fields.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}
