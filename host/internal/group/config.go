package group

import (
	"errors"
	"fmt"
	"time"
)

// A group's settings, as host.Config.Group gives them (host.GroupConfig).

// Config makes a host one member of a group of hosts that share the rules
// (see the package doc).
type Config struct {
	// Name names the group; hosts with the same name on one store share the
	// rules. It may hold letters, digits, '-', '_' and '.'.
	Name string
	// TTL is the membership and ownership lease time (DefaultTTL when
	// zero): a dead host's rules run elsewhere within TTL plus one renewal
	// interval (TTL/3). At least 300 ms.
	TTL time.Duration
}

// DefaultTTL is the group lease time when Config.TTL is zero
// (host.DefaultGroupTTL).
const DefaultTTL = 10 * time.Second

// Validate reports what is wrong with c, if anything.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("group: a name is required")
	}
	for _, ch := range c.Name {
		if !(ch == '-' || ch == '_' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			return fmt.Errorf("group %q: names hold only letters, digits, '-', '_' and '.'", c.Name)
		}
	}
	if c.TTL != 0 && c.TTL < 300*time.Millisecond {
		return fmt.Errorf("group %q: ttl %v is below the 300ms minimum", c.Name, c.TTL)
	}
	return nil
}
