package host

import (
	"strings"
	"testing"
	"time"
)

// Bad group settings are refused with what is wrong.
func TestGroupConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  GroupConfig
		want string
	}{
		{GroupConfig{}, "a name is required"},
		{GroupConfig{Name: "a/b"}, `group "a/b": names hold only`},
		{GroupConfig{Name: "ok", TTL: time.Millisecond}, "below the 300ms minimum"},
	} {
		if err := tc.cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (GroupConfig{Name: "line-1_a.b"}).validate(); err != nil {
		t.Fatal(err)
	}
}
