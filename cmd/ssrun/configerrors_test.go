package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestConfigErrorsUseYAMLNames(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"rules:\n  a.lua:\n    wirte: [x]\n", `line 3: unknown setting "wirte" in defaults: or a rule's settings (want one of timeout, grace, memory, max_value, mailbox, mailbox_keys, mode, concurrency, log_lines, log_bytes, max_timers, rescan, max_watched_keys, read, write, watch, lock, canary, ownership)`},
		{"rules:\n  a.lua:\n    concurrency: 100\n", `rules: a.lua: concurrency: 100 is out of range: say 1 (the default) to 64`},
		{"rules:\n  a.lua:\n    ownership: everywhere\n", `rules: a.lua: ownership: "everywhere" is not a choice: leave it out (one host of the group) or say "every-host"`},
		{"bogus: 1\n", `line 1: unknown setting "bogus" at the top level (want one of broker, defaults, rules, plugins)`},
		{"broker:\n  tcp_port: 99999\n", `line 2: "99999" is not a whole number from 0 to 65535`},
		{"broker:\n  use_tls: maybe\n", `line 2: "maybe" is not true or false`},
		{"defaults:\n  mailbox: lots\n", `line 2: "lots" is not a whole number`},
		{"rules: [a]\n", "line 1: want a map from rule file names"},
		{"rules:\n  a.lua:\n    read: x\n", `line 3: "x" is not a list of key patterns`},
	} {
		_, err := loadConfig(writeFile(t, "ssrun.yaml", tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || regexp.MustCompile(`main\.|uint16|!!`).MatchString(err.Error()) {
			t.Errorf("%q: %v\nwant %q and no Go names", tc.yaml, err, tc.want)
		}
	}
}
