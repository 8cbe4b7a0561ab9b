package broker

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/ssrun/ssrun/protocol/wire"
)

// This file decides which MQTT topics a principal may use: the topic
// patterns of the ACL file's brokerResources, and the built-in grants every
// state store client needs (its own response and notification topics, the
// request topic) that apply whenever authorization is on.

// Topic spaces of the state store (statestore-protocol.md §1).
const (
	// storeSpace is where only the store publishes (notifications).
	storeSpace = "clients/statestore"
	// notifyRoot starts every notification topic.
	notifyRoot = storeSpace + "/v1/" + wire.ServiceGUID
	// sharePrefix starts a shared subscription: $share/<group>/<filter>.
	sharePrefix = "$share/"
)

// inStoreSpace reports whether topic is in the store's own topic space,
// where nobody but the store publishes.
func inStoreSpace(topic string) bool {
	return topic == storeSpace || strings.HasPrefix(topic, storeSpace+"/")
}

// principal is who a connection is: its user name (as authenticated, or as
// claimed without a password file) and client id, with the topic roots the
// built-in grants give it.
type principal struct {
	user, id string

	respHex   string // clients/<HEX(id)>: Go SDK responses
	respRaw   string // clients/<id>: Rust and .NET responses; "" when the raw id could name another client's topics
	notifyHex string // clients/statestore/v1/<GUID>/<HEX(id)>: notifications (Rust filter)
	notifyNet string // clients/statestore/v1/<GUID>/<id>/command/notify: the .NET SDK's (never matching) filter; "" when unusable
}

func newPrincipal(user, id string) principal {
	hexID := wire.Hex([]byte(id))
	pr := principal{user: user, id: id, respHex: "clients/" + hexID, notifyHex: notifyRoot + "/" + hexID}
	if rawTopicsSafe(id) {
		pr.respRaw = "clients/" + id
	}
	if id != "" && !strings.ContainsAny(id, "+#\x00") {
		// An exact filter three levels under the GUID: no notification
		// topic (four levels) matches it, whoever's id it spells.
		pr.notifyNet = notifyRoot + "/" + id + "/command/notify"
	}
	return pr
}

// rawTopicsSafe reports whether clients/<id>/# can be granted to the client
// id without reaching another client's topics: id is one topic level, and
// not one that another client's topics use: "statestore" (the store's
// space) or upper-case hex (clients/<HEX(other id)>/..., the Go SDK's
// response topics).
func rawTopicsSafe(id string) bool {
	if !plainLevel(id) || id == "statestore" {
		return false
	}
	if len(id)%2 != 0 {
		return true
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'A' <= c && c <= 'F') {
			return true
		}
	}
	return false
}

// plainLevel reports whether s can stand for exactly one literal topic
// level: non-empty, no '/', no wildcard, no NUL.
func plainLevel(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/+#\x00")
}

// within reports whether filter f stays inside root's subtree (root itself
// included): its first levels are root's, literally.
func within(f, root string) bool {
	return root != "" && (f == root || len(f) > len(root) && f[len(root)] == '/' && strings.HasPrefix(f, root))
}

// builtinSubscribe reports whether the built-in grants let pr subscribe to
// (and receive on) filter f: its own response topics and its own
// notification topics, in every SDK's shape (statestore-protocol.md §1).
func (pr *principal) builtinSubscribe(f string) bool {
	return within(f, pr.respHex) || within(f, pr.respRaw) || within(f, pr.notifyHex) ||
		pr.notifyNet != "" && f == pr.notifyNet
}

// stripShare returns the topic filter of a shared subscription
// ($share/<group>/<filter>), or f itself.
func stripShare(f string) string {
	if len(f) > len(sharePrefix) && strings.EqualFold(f[:len(sharePrefix)], sharePrefix) {
		if _, filter, ok := strings.Cut(f[len(sharePrefix):], "/"); ok {
			return filter
		}
	}
	return f
}

type levelKind uint8

const (
	levelLit  levelKind = iota
	levelPlus           // +
	levelHash           // #
	levelTmpl           // {principal.*}, one literal level
)

type topicLevel struct {
	kind levelKind
	lit  string
	tmpl tmplVar
}

// topicPattern is a compiled topic (filter) of brokerResources.
type topicPattern struct {
	levels []topicLevel
}

// compileTopic checks an ACL topic filter: MQTT filter syntax, and
// templates only as whole levels (AIO's rule).
func compileTopic(src string) (topicPattern, error) {
	switch {
	case src == "":
		return topicPattern{}, errors.New("empty topic")
	case !utf8.ValidString(src) || strings.IndexByte(src, 0) >= 0:
		return topicPattern{}, errors.New("topic is not valid UTF-8 text")
	case strings.HasPrefix(strings.ToLower(src), sharePrefix):
		return topicPattern{}, errors.New("grant the topic filter itself: a $share/<group>/<filter> subscription is checked against <filter>")
	}
	var p topicPattern
	levels := strings.Split(src, "/")
	for i, l := range levels {
		switch {
		case l == "#":
			if i != len(levels)-1 {
				return topicPattern{}, errors.New("'#' must be the last level")
			}
			p.levels = append(p.levels, topicLevel{kind: levelHash})
		case l == "+":
			p.levels = append(p.levels, topicLevel{kind: levelPlus})
		case strings.ContainsAny(l, "+#"):
			return topicPattern{}, errors.New("'+' and '#' must be a whole level")
		case strings.Contains(l, tokPrincipal):
			v, n, err := parseToken(l[strings.Index(l, tokPrincipal):])
			if err != nil {
				return topicPattern{}, err
			}
			if n != len(l) {
				return topicPattern{}, errors.New("a template must be a whole level, e.g. clients/" + tokClientID + "/#")
			}
			p.levels = append(p.levels, topicLevel{kind: levelTmpl, tmpl: v})
		default:
			p.levels = append(p.levels, topicLevel{kind: levelLit, lit: l})
		}
	}
	return p, nil
}

// covers reports whether every topic matching filter f (a topic name is a
// filter without wildcards) matches p for principal pr. A wildcard in the
// first level does not reach topics starting with '$' (MQTT-4.7.2-1); a
// template whose value is empty or not one plain level matches nothing.
func (p *topicPattern) covers(f string, pr *principal) bool {
	dollar := strings.HasPrefix(f, "$")
	rest, more := f, true
	for i, lv := range p.levels {
		if lv.kind == levelHash {
			return i > 0 || !dollar
		}
		if !more {
			return false
		}
		var level string
		level, rest, more = strings.Cut(rest, "/")
		switch lv.kind {
		case levelPlus:
			if level == "#" || i == 0 && dollar {
				return false
			}
		case levelLit:
			if level != lv.lit {
				return false
			}
		case levelTmpl:
			v, ok := lv.tmpl.value(pr)
			if !ok || !plainLevel(v) || level != v {
				return false
			}
		}
	}
	return !more
}
