package group

import (
	"context"
	"errors"
	"sync"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Ownership is what the rules of a host in a group use of it (the host's
// services hold it): the ownership leases that fence their writes, and where
// they record what they handled.
type Ownership struct {
	name   string        // the group's
	prefix string        // the host's reserved prefix (Deps.Prefix)
	ls     *lease.Leases // member, roster lock and ownership leases

	mu       sync.Mutex
	paths    map[string]string               // rule name -> path: the rules the group shares
	progress map[string]*membership.Progress // owned rules' handled versions
}

func (o *Ownership) key(rest string) string      { return o.prefix + "group/" + o.name + "/" + rest }
func (o *Ownership) leaseKey(rule string) string { return o.key("rule/" + membership.RuleHash(rule)) }

// Fence returns the token an owned rule's write carries (the zero token for
// a rule the group does not share), or LOCK_LOST when this host does not
// own the rule for certain any more.
func (o *Ownership) Fence(rule, verb, key string) (hlc.HLC, error) {
	o.mu.Lock()
	_, shared := o.paths[rule]
	o.mu.Unlock()
	if !shared {
		return hlc.HLC{}, nil
	}
	tok, err := o.ls.FenceToken(verb, key, o.leaseKey(rule))
	if err != nil {
		return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %q: rule %s is no longer owned by this host in group %s", verb, key, rule, o.name)
	}
	return tok, nil
}

// Refenced is called when the store refused an owned rule's write with err.
// A token lower than the key's is no proof of a lost rule: another rule's
// write with a lease renewed later fenced the key higher. So the lease is
// renewed now: if this host still holds it, the new token is larger than
// any the store issued before, and the write may be retried with it; if
// not, the rule is lost (its loss stops it).
func (o *Ownership) Refenced(ctx context.Context, rule string, err error) (hlc.HLC, bool) {
	if !errors.Is(err, protocol.ErrFencingTokenLowerVersion) {
		return hlc.HLC{}, false
	}
	l := o.ls.Get(o.leaseKey(rule))
	if l == nil || l.IsLost() {
		return hlc.HLC{}, false
	}
	sent := o.ls.Now()
	if _, why, _ := l.Held(sent); why != "" {
		return hlc.HLC{}, false
	}
	res, serr := o.ls.Client().Set(ctx, []byte(l.Name), []byte(l.Holder), protocol.SetOptions{Condition: protocol.CondNEX, Expiry: l.TTL})
	switch {
	case serr != nil:
		return hlc.HLC{}, false
	case !res.Applied:
		o.ls.LoseLease(l, "taken by another host of the group")
		return hlc.HLC{}, false
	}
	l.Renewed(res.Version, sent)
	return res.Version, true
}

// ProgressFor returns where the owned rule name records what it handled,
// or nil for a rule the group does not share.
func (o *Ownership) ProgressFor(name string) *membership.Progress {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.progress[name]
}
