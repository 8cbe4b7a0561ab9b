package group

import (
	"strings"
	"testing"
	"time"
)

// Bad group settings are refused with what is wrong.
func TestGroupConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "a name is required"},
		{Config{Name: "a/b"}, `group "a/b": names hold only`},
		{Config{Name: "ok", TTL: time.Millisecond}, "below the 300ms minimum"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{Name: "line-1_a.b"}).Validate(); err != nil {
		t.Fatal(err)
	}
}
