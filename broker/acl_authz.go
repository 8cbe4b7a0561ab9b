package broker

import (
	"log/slog"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/protocol/wire"
	"github.com/ssrun/ssrun/store"
)

// This file applies the authorization model of acl.go to connections: who
// holds which client id (session ownership), and the decisions the hook asks
// for: may this connection connect, publish, subscribe, read or write a key.

// Reason codes of refused connections.
var (
	codeConnectDenied  = packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "not authorized to connect"}
	codeWillDenied     = packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "not authorized to publish the will topic"}
	codeClientIDDenied = packets.Code{Code: packets.ErrClientIdentifierNotValid.Code, Reason: "client identifier not available to this user"}
)

// deniedWillTopic replaces the topic of a will its client may no longer
// publish (the ACL changed since it connected); mayReceive never lets it
// through, so nobody receives it.
const deniedWillTopic = "$ssrun/denied-will"

// authz holds what authorization needs at run time. A nil *authz means
// authorization is off (no password file, no ACL file, no Authorize).
type authz struct {
	srv   *mqtt.Server
	log   *slog.Logger
	creds atomic.Pointer[credentials] // nil: user names as claimed; replaced whole on reload
	// policy is the ACL file's content; nil with the default policy (no
	// file). Replaced whole on reload.
	policy atomic.Pointer[aclPolicy]

	mu       sync.RWMutex
	sessions map[string]*session // client id -> the connection that holds it
	sweepAt  int                 // sweep dead entries when sessions grows past this
}

// session is one connection's identity and its cache of the ACL rules that
// name it.
type session struct {
	cl    *mqtt.Client
	pr    principal
	rules atomic.Pointer[ruleCache]
}

type ruleCache struct {
	policy *aclPolicy
	rules  []*aclRule
}

func newAuthz(srv *mqtt.Server, log *slog.Logger, creds *credentials, policy *aclPolicy) *authz {
	a := &authz{srv: srv, log: log, sessions: map[string]*session{}, sweepAt: 64}
	if creds != nil {
		a.creds.Store(creds)
	}
	if policy != nil {
		a.policy.Store(policy)
	}
	return a
}

// newSession captures cl's identity. mochi's strings alias the CONNECT
// packet's buffer, and the user name is a byte slice of it: both are copied.
func newSession(cl *mqtt.Client) *session {
	return &session{cl: cl, pr: newPrincipal(string(cl.Properties.Username), cloneString(cl.ID))}
}

func cloneString(s string) string { return string([]byte(s)) }

// sessionOf returns the session of cl: the one recorded when it connected,
// or, for a connection that no longer holds its client id, a fresh one.
func (a *authz) sessionOf(cl *mqtt.Client) *session {
	a.mu.RLock()
	s := a.sessions[cl.ID]
	a.mu.RUnlock()
	if s != nil && s.cl == cl {
		return s
	}
	return newSession(cl)
}

// rulesOf returns the current policy and the rules in it that name s.
func (a *authz) rulesOf(s *session) (*aclPolicy, []*aclRule) {
	p := a.policy.Load()
	if p == nil {
		return nil, nil
	}
	if c := s.rules.Load(); c != nil && c.policy == p {
		return p, c.rules
	}
	c := &ruleCache{policy: p, rules: p.rulesFor(&s.pr)}
	s.rules.Store(c)
	return p, c.rules
}

// connect authenticates and authorizes a new connection. It returns
// CodeSuccess, or the CONNACK reason code that refuses it and why (for the
// log). On success, cl holds its client id from now on.
func (a *authz) connect(cl *mqtt.Client, pk packets.Packet) (packets.Code, string) {
	if c := a.creds.Load(); c != nil && !c.check(pk.Connect.Username, pk.Connect.Password) {
		return packets.ErrBadUsernameOrPassword, "bad username or password"
	}
	s := newSession(cl)
	if p, rules := a.rulesOf(s); p != nil {
		if !mayConnect(rules) {
			return codeConnectDenied, "no rule of the ACL grants Connect"
		}
		if !p.clientIDAllowed(&s.pr) {
			return codeClientIDDenied, "the ACL's users section does not bind this client id to this user"
		}
	}
	if will := &cl.Properties.Will; atomic.LoadUint32(&will.Flag) == 1 && !a.mayPublish(s, will.TopicName) {
		return codeWillDenied, "will topic " + will.TopicName + " not authorized"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.sessions[s.pr.id]; cur != nil && cur.pr.user != s.pr.user && a.live(cur) {
		return codeClientIDDenied, "client id held by another user's session"
	}
	a.sessions[s.pr.id] = s
	if len(a.sessions) > a.sweepAt {
		for id, o := range a.sessions {
			if !a.live(o) {
				delete(a.sessions, id)
			}
		}
		a.sweepAt = 2*len(a.sessions) + 64
	}
	return packets.CodeSuccess, ""
}

// live reports whether s's session still exists: its connection is open
// (or still being set up), or it ended but mochi keeps its session
// (session expiry > 0) until it expires.
func (a *authz) live(s *session) bool {
	if !s.cl.Closed() {
		return true
	}
	if sessionEnds(s.cl) {
		return false
	}
	cur, ok := a.srv.Clients.Get(s.pr.id)
	return ok && cur == s.cl
}

// ended releases cl's client id when its session ends (at disconnect with
// no session expiry, or when mochi expires the session).
func (a *authz) ended(cl *mqtt.Client) {
	a.mu.Lock()
	if s := a.sessions[cl.ID]; s != nil && s.cl == cl {
		delete(a.sessions, cl.ID)
	}
	a.mu.Unlock()
}

// mayPublish decides a PUBLISH (or a will) to topic.
func (a *authz) mayPublish(s *session, topic string) bool {
	switch {
	case inStoreSpace(topic):
		return false
	case topic == wire.RequestTopic:
		return true
	}
	_, rules := a.rulesOf(s)
	return grantsTopic(rules, &s.pr, topic, true)
}

// mayReceive decides a SUBSCRIBE to filter, the delivery of a message on a
// topic (mochi checks each delivery), and a response topic.
func (a *authz) mayReceive(s *session, filter string) bool {
	f := stripShare(filter)
	if f == deniedWillTopic {
		return false
	}
	if s.pr.builtinSubscribe(f) {
		return true
	}
	_, rules := a.rulesOf(s)
	return grantsTopic(rules, &s.pr, f, false)
}

// mayRespondTo decides a request's response topic: its sender must be
// allowed to subscribe to it, and, unless it is one of the sender's own
// response topics, to publish to it too (the store's reply on it carries a
// value the sender chose).
func (a *authz) mayRespondTo(s *session, rt string) bool {
	return a.mayReceive(s, rt) && (s.pr.builtinSubscribe(rt) || a.mayPublish(s, rt))
}

// mayKey decides a state store command on key. Without an ACL file every
// key is allowed.
func (a *authz) mayKey(s *session, m store.Access, key []byte) bool {
	p, rules := a.rulesOf(s)
	return p == nil || grantsKey(rules, &s.pr, m, key)
}

// keyCheck returns the key decision for cl's requests; nil (everything
// allowed) without an ACL file.
func (a *authz) keyCheck(cl *mqtt.Client) func(m store.Access, key []byte) bool {
	if a.policy.Load() == nil {
		return nil
	}
	s := a.sessionOf(cl)
	return func(m store.Access, key []byte) bool { return a.mayKey(s, m, key) }
}

// will returns the will to publish for cl: unchanged if cl may still
// publish it, else sent where nobody receives it.
func (a *authz) will(cl *mqtt.Client, w mqtt.Will) mqtt.Will {
	if a.mayPublish(a.sessionOf(cl), w.TopicName) {
		return w
	}
	a.log.Info("will not published: the client may no longer publish its topic", "client", cl.ID, "topic", w.TopicName)
	w.TopicName, w.Retain = deniedWillTopic, false
	return w
}
