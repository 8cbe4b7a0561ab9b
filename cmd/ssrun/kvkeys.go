package main

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/protocol"
)

// keyJSON is a key as `kv keys -o json` prints it, one object per line.
type keyJSON struct {
	Key       *string `json:"key,omitempty"`
	KeyBase64 []byte  `json:"key_base64,omitempty"` // a key that is not UTF-8
}

// kvKeys is `ssrun kv keys PATTERN`: the keys matching PATTERN, listed by
// SCAN page by page as they come (against AIO and the embedded store
// alike).
func (a *app) kvKeys(o *kvOpts) *cobra.Command {
	var count bool
	cmd := &cobra.Command{
		Use:   "keys PATTERN",
		Short: "List the keys matching PATTERN (SCAN: * ? [a-z] \\x, the whole key)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, o, func(ctx context.Context, c *protocol.Client) error {
				n := 0
				for key, err := range c.Keys(ctx, []byte(args[0]), protocol.ScanOptions{}) {
					if err != nil {
						return fmt.Errorf("keys %s: %w", shown(args[0]), err)
					}
					n++
					switch {
					case count:
					case o.output == "json" && utf8.Valid(key):
						k := string(key)
						_ = a.jsonLine(keyJSON{Key: &k})
					case o.output == "json":
						_ = a.jsonLine(keyJSON{KeyBase64: key})
					default:
						fmt.Fprintln(a.stdout, shown(string(key)))
					}
				}
				if count {
					fmt.Fprintln(a.stdout, n)
				}
				if n == 0 {
					return &exitError{code: 1, msg: fmt.Sprintf("no key matches %s", shown(args[0]))}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&count, "count", false, "print only how many keys match")
	return cmd
}
