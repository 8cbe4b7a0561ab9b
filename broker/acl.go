package broker

import (
	"github.com/ssrun/ssrun/internal/glob"
	"github.com/ssrun/ssrun/store"
)

// This file is the broker's authorization model: an ACL (loaded from the
// file of acl_file.go, or none for the default policy) and the decisions
// made from it. The file is modelled on Azure IoT Operations'
// BrokerAuthorization: allow-only rules, each naming principals (user names
// and client ids, globs, OR-ed) and what they may do: Connect, Publish and
// Subscribe on topics, Read and Write on state store keys. ssrun adds a
// `users` section that binds users to the client ids they may connect with.
//
// Whenever authorization is on (a password file, an ACL file, or
// Config.Authorize), these hold whatever the file says:
//   - every client may publish requests to the request topic, and subscribe
//     to (and receive on) its own response and notification topics;
//   - nobody but the store publishes into clients/statestore/...;
//   - a request's response topic must be one its sender may subscribe to;
//   - a client id belongs to the user whose connection holds it, until that
//     session ends (acl_authz.go).
//
// Without an ACL file that is all (the default policy): anyone who may
// connect may connect, and read and write every key. With one, a client
// needs a Connect grant, and keys and other topics need grants.
//
// A reloaded ACL (acl_reload.go) applies to every decision made after it,
// on live connections too, which stay connected: new requests, SUBSCRIBEs
// and PUBLISHes, and each delivery. A subscription or KEYNOTIFY registration
// made earlier stays in place, but nothing the new ACL does not let its
// client read is delivered on it (mochi checks every delivery; the outbox
// filters notifications), until a later ACL grants it again. Connections
// are not re-checked against Connect grants or client id bindings; their
// next connection is.

// aclPolicy is one loaded ACL file. It is immutable: a reload builds a new
// one.
type aclPolicy struct {
	rules []*aclRule
	// users binds user names to the client ids they may use (ssrun's
	// extension); bound lists every binding for the reverse check.
	users map[string][]glob.Glob
	bound []glob.Glob
}

// aclRule is one element of authorizationPolicies.rules.
type aclRule struct {
	usernames []glob.Glob
	clientIDs []glob.Glob
	connect   bool
	publish   []topicPattern
	subscribe []topicPattern
	keyGrants []keyGrant
}

// keyGrant is one stateStoreResources entry.
type keyGrant struct {
	methods  store.Access
	patterns []glob.Glob // keyType Pattern
	exact    []exactKey  // keyType String
	binary   []string    // keyType Binary, decoded
}

// applies reports whether the rule names pr (any listed user name or client
// id matches).
func (r *aclRule) applies(pr *principal) bool {
	for _, g := range r.usernames {
		if g.MatchString(pr.user, pr) {
			return true
		}
	}
	for _, g := range r.clientIDs {
		if g.MatchString(pr.id, pr) {
			return true
		}
	}
	return false
}

// rulesFor returns the rules that name pr.
func (p *aclPolicy) rulesFor(pr *principal) []*aclRule {
	var out []*aclRule
	for _, r := range p.rules {
		if r.applies(pr) {
			out = append(out, r)
		}
	}
	return out
}

// clientIDAllowed applies the users section: a user listed there may use
// only the client ids bound to it, and a client id bound to any user may be
// used only by the users it is bound to.
func (p *aclPolicy) clientIDAllowed(pr *principal) bool {
	id := []byte(pr.id)
	mine, listed := p.users[pr.user]
	for _, g := range mine {
		if g.Match(id, pr) {
			return true
		}
	}
	if listed {
		return false
	}
	for _, g := range p.bound {
		if g.Match(id, pr) {
			return false
		}
	}
	return true
}

// mayConnect reports whether one of rules grants Connect.
func mayConnect(rules []*aclRule) bool {
	for _, r := range rules {
		if r.connect {
			return true
		}
	}
	return false
}

// grantsTopic reports whether one of rules grants publishing to topic
// (publish) or subscribing to filter topic.
func grantsTopic(rules []*aclRule, pr *principal, topic string, publish bool) bool {
	for _, r := range rules {
		pats := r.subscribe
		if publish {
			pats = r.publish
		}
		for i := range pats {
			if pats[i].covers(topic, pr) {
				return true
			}
		}
	}
	return false
}

// grantsKey reports whether one of rules grants method m on key.
func grantsKey(rules []*aclRule, pr *principal, m store.Access, key []byte) bool {
	for _, r := range rules {
		for i := range r.keyGrants {
			if g := &r.keyGrants[i]; g.methods&m != 0 && g.matches(key, pr) {
				return true
			}
		}
	}
	return false
}

func (g *keyGrant) matches(key []byte, pr *principal) bool {
	for _, p := range g.patterns {
		if p.Match(key, pr) {
			return true
		}
	}
	for _, e := range g.exact {
		if e.match(key, pr) {
			return true
		}
	}
	for _, b := range g.binary {
		if string(key) == b {
			return true
		}
	}
	return false
}
