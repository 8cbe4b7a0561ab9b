package broker

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ssrun/ssrun/internal/glob"
	"github.com/ssrun/ssrun/internal/safefile"
	"github.com/ssrun/ssrun/internal/yamldoc"
	"github.com/ssrun/ssrun/store"
)

// This file reads the ACL file (Config.ACLFile, `ssrun broker --acl`). The
// file is hostile input: every problem is an *ACLFileError naming the file,
// the line and the field, and nothing in it can make the parser or the
// checks built from it panic or run away (see FuzzParseACL).
//
// The shape is Azure IoT Operations' BrokerAuthorization, either its spec
// alone or the whole Kubernetes resource:
//
//	authorizationPolicies:          # or spec.authorizationPolicies
//	  cache: Enabled                # accepted, ignored
//	  rules:
//	    - principals:
//	        usernames: [alice]      # globs; a rule applies if any entry matches
//	        clientIds: ["sensor-*"]
//	      brokerResources:
//	        - method: Connect
//	        - method: Publish       # or Subscribe
//	          topics: ["telemetry/{principal.clientId}/#"]
//	      stateStoreResources:
//	        - method: ReadWrite     # Read (GET, KEYNOTIFY), Write (SET, DEL, VDEL)
//	          keyType: Pattern      # glob; String: exact; Binary: base64 of the bytes
//	          keys: ["alice/*"]
//	users:                          # ssrun: the client ids each user may use
//	  alice:
//	    clientIds: ["alice-*"]
//
// docs/acl.example.yaml is a commented example.

// maxACLFileSize bounds the ACL file.
const maxACLFileSize = 1 << 20

// ErrACLFile is wrapped by every error about the ACL file.
var ErrACLFile = errors.New("broker: bad ACL file")

// ACLFileError names the file, line and field of an ACL file problem. It
// unwraps to ErrACLFile.
type ACLFileError struct {
	File  string
	Line  int    // 0 when the problem is not tied to a line
	Field string // e.g. authorizationPolicies.rules[0].brokerResources[1].method; "" for the whole file
	Msg   string
	Err   error // underlying error, if any
}

func (e *ACLFileError) Error() string {
	var b strings.Builder
	b.WriteString("acl file ")
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap returns ErrACLFile and the underlying error.
func (e *ACLFileError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrACLFile, e.Err}
	}
	return []error{ErrACLFile}
}

// readACLFile reads and parses path; data is what was read.
func readACLFile(path string) (p *aclPolicy, data []byte, err error) {
	data, err = safefile.Read(path, maxACLFileSize)
	if err != nil {
		return nil, nil, &ACLFileError{File: path, Msg: "cannot read", Err: err}
	}
	p, err = parseACL(path, data)
	return p, data, err
}

// yamlLine finds the line number in a yaml.v3 error message.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// parseACL parses the ACL file's content; file names it in errors.
func parseACL(file string, data []byte) (*aclPolicy, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		err = nil // empty: refused below
	} else if err == nil {
		err = yamldoc.Rest(dec) // else dropped unread, with the rules it holds
	}
	if se := (*yamldoc.SecondError)(nil); errors.As(err, &se) {
		return nil, &ACLFileError{File: file, Line: se.Line, Msg: se.Msg()}
	}
	if err != nil {
		e := &ACLFileError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLine.FindStringSubmatchIndex(e.Msg); m != nil {
			e.Line, _ = strconv.Atoi(e.Msg[m[2]:m[3]])
			if m[0] == 0 { // "line N: text": the line goes in front
				e.Msg = strings.TrimPrefix(e.Msg[m[1]:], ": ")
			}
		}
		return nil, e
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &ACLFileError{File: file, Msg: "empty file: want authorizationPolicies.rules (`rules: []` denies everything)"}
	}
	ps := &aclParser{file: file, policy: &aclPolicy{}}
	if err := ps.top(doc.Content[0]); err != nil {
		return nil, err
	}
	return ps.policy, nil
}

type aclParser struct {
	file   string
	policy *aclPolicy
}

func (ps *aclParser) errAt(n *yaml.Node, field, format string, args ...any) error {
	return &ACLFileError{File: ps.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fields returns the values of mapping n by key, refusing other keys,
// duplicates and non-mappings.
func (ps *aclParser) fields(n *yaml.Node, field string, allowed ...string) (map[string]*yaml.Node, error) {
	if err := ps.plain(n, field); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, ps.errAt(n, field, "want a mapping (key: value lines), found %s", kindName(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := ps.plain(k, field); err != nil {
			return nil, err
		}
		name := k.Value
		sub := fieldJoin(field, name)
		if k.Kind != yaml.ScalarNode || !slices.Contains(allowed, name) {
			return nil, ps.errAt(k, sub, "unknown field (want one of %s)", strings.Join(allowed, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, ps.errAt(k, sub, "given twice")
		}
		if err := ps.plain(v, sub); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// plain refuses aliases: expanding them could blow up (billion laughs), and
// an ACL has no need for them.
func (ps *aclParser) plain(n *yaml.Node, field string) error {
	if n.Kind == yaml.AliasNode {
		return ps.errAt(n, field, "YAML aliases (*name) are not supported in the ACL file")
	}
	return nil
}

func (ps *aclParser) seq(n *yaml.Node, field string) ([]*yaml.Node, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, ps.errAt(n, field, "want a list, found %s", kindName(n))
	}
	for i, c := range n.Content {
		if err := ps.plain(c, fieldIndex(field, i)); err != nil {
			return nil, err
		}
	}
	return n.Content, nil
}

func (ps *aclParser) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", ps.errAt(n, field, "want a string, found %s", kindName(n))
	}
	return n.Value, nil
}

// list hands each element of list n to each, with its field, and returns
// how many there were.
func (ps *aclParser) list(n *yaml.Node, field string, each func(n *yaml.Node, field string) error) (int, error) {
	items, err := ps.seq(n, field)
	if err != nil {
		return 0, err
	}
	for i, c := range items {
		if err := each(c, fieldIndex(field, i)); err != nil {
			return 0, err
		}
	}
	return len(items), nil
}

// strs is list for a list of strings.
func (ps *aclParser) strs(n *yaml.Node, field string, each func(s string, n *yaml.Node, field string) error) (int, error) {
	return ps.list(n, field, func(c *yaml.Node, field string) error {
		s, err := ps.str(c, field)
		if err != nil {
			return err
		}
		return each(s, c, field)
	})
}

func (ps *aclParser) top(root *yaml.Node) error {
	f, err := ps.fields(root, "", "apiVersion", "kind", "metadata", "spec", "authorizationPolicies", "users")
	if err != nil {
		return err
	}
	if k := f["kind"]; k != nil {
		s, err := ps.str(k, "kind")
		if err != nil {
			return err
		}
		if s != "BrokerAuthorization" {
			return ps.errAt(k, "kind", "%q is not BrokerAuthorization", s)
		}
	}
	policies, field := f["authorizationPolicies"], "authorizationPolicies"
	if spec := f["spec"]; spec != nil {
		sf, err := ps.fields(spec, "spec", "authorizationPolicies")
		if err != nil {
			return err
		}
		if policies != nil {
			return ps.errAt(spec, "spec", "give authorizationPolicies either at the top or under spec, not both")
		}
		policies, field = sf["authorizationPolicies"], "spec.authorizationPolicies"
	}
	if policies == nil {
		return ps.errAt(root, "", "no authorizationPolicies (or spec.authorizationPolicies) with rules (`rules: []` denies everything)")
	}
	if err := ps.policies(policies, field); err != nil {
		return err
	}
	if u := f["users"]; u != nil {
		return ps.users(u, "users")
	}
	return nil
}

func (ps *aclParser) policies(n *yaml.Node, field string) error {
	f, err := ps.fields(n, field, "cache", "rules")
	if err != nil {
		return err
	}
	if c := f["cache"]; c != nil {
		s, err := ps.str(c, fieldJoin(field, "cache"))
		if err != nil {
			return err
		}
		if !strings.EqualFold(s, "Enabled") && !strings.EqualFold(s, "Disabled") {
			return ps.errAt(c, fieldJoin(field, "cache"), "%q: want Enabled or Disabled", s)
		}
	}
	rn := f["rules"]
	if rn == nil {
		return ps.errAt(n, field, "no rules (`rules: []` denies everything)")
	}
	_, err = ps.list(rn, fieldJoin(field, "rules"), func(n *yaml.Node, field string) error {
		rule, err := ps.rule(n, field)
		if err == nil {
			ps.policy.rules = append(ps.policy.rules, rule)
		}
		return err
	})
	return err
}

func (ps *aclParser) rule(n *yaml.Node, field string) (*aclRule, error) {
	f, err := ps.fields(n, field, "principals", "brokerResources", "stateStoreResources")
	if err != nil {
		return nil, err
	}
	r := &aclRule{}
	pn := f["principals"]
	if pn == nil {
		return nil, ps.errAt(n, field, "no principals: say whom the rule is for (usernames, clientIds)")
	}
	if err := ps.principals(pn, fieldJoin(field, "principals"), r); err != nil {
		return nil, err
	}
	if b := f["brokerResources"]; b != nil {
		if _, err := ps.list(b, fieldJoin(field, "brokerResources"), func(n *yaml.Node, field string) error {
			return ps.brokerResource(n, field, r)
		}); err != nil {
			return nil, err
		}
	}
	if s := f["stateStoreResources"]; s != nil {
		if _, err := ps.list(s, fieldJoin(field, "stateStoreResources"), func(n *yaml.Node, field string) error {
			g, err := ps.keyGrant(n, field)
			if err == nil {
				r.keyGrants = append(r.keyGrants, g)
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (ps *aclParser) principals(n *yaml.Node, field string, r *aclRule) error {
	f, err := ps.fields(n, field, "usernames", "clientIds", "attributes")
	if err != nil {
		return err
	}
	if a := f["attributes"]; a != nil {
		return ps.errAt(a, fieldJoin(field, "attributes"), "not supported: ssrun's users have no attributes (name them in usernames)")
	}
	names := 0
	for _, list := range []struct {
		name string
		dst  *[]glob.Glob
	}{{"usernames", &r.usernames}, {"clientIds", &r.clientIDs}} {
		ln := f[list.name]
		if ln == nil {
			continue
		}
		if _, err := ps.strs(ln, fieldJoin(field, list.name), func(s string, n *yaml.Node, fld string) error {
			g, err := compileGlob(s, false)
			if err != nil {
				return ps.errAt(n, fld, "%v", err)
			}
			*list.dst = append(*list.dst, g)
			names++
			return nil
		}); err != nil {
			return err
		}
	}
	if names == 0 {
		return ps.errAt(n, field, "empty: list usernames or clientIds (\"*\" matches everyone)")
	}
	return nil
}

func (ps *aclParser) brokerResource(n *yaml.Node, field string, r *aclRule) error {
	f, err := ps.fields(n, field, "method", "topics")
	if err != nil {
		return err
	}
	mn := f["method"]
	if mn == nil {
		return ps.errAt(n, field, "no method (Connect, Publish or Subscribe)")
	}
	method, err := ps.str(mn, fieldJoin(field, "method"))
	if err != nil {
		return err
	}
	tn := f["topics"]
	switch {
	case strings.EqualFold(method, "Connect"):
		if tn != nil {
			if items, _ := ps.seq(tn, fieldJoin(field, "topics")); len(items) > 0 {
				return ps.errAt(tn, fieldJoin(field, "topics"), "Connect takes no topics")
			}
		}
		r.connect = true
		return nil
	case strings.EqualFold(method, "Publish"), strings.EqualFold(method, "Subscribe"):
	default:
		return ps.errAt(mn, fieldJoin(field, "method"), "unknown method %q (want Connect, Publish or Subscribe)", method)
	}
	publish := strings.EqualFold(method, "Publish")
	if tn == nil {
		return ps.errAt(n, field, "%s needs topics", method)
	}
	count, err := ps.strs(tn, fieldJoin(field, "topics"), func(s string, n *yaml.Node, fld string) error {
		p, err := compileTopic(s)
		if err != nil {
			return ps.errAt(n, fld, "topic %s: %v", quoteShort(s), err)
		}
		if publish && len(p.levels) >= 2 && p.levels[0] == (topicLevel{kind: levelLit, lit: "clients"}) &&
			p.levels[1] == (topicLevel{kind: levelLit, lit: "statestore"}) {
			return ps.errAt(n, fld, "topic %s: nobody but the state store publishes into %s/...", quoteShort(s), storeSpace)
		}
		if publish {
			r.publish = append(r.publish, p)
		} else {
			r.subscribe = append(r.subscribe, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if count == 0 {
		return ps.errAt(tn, fieldJoin(field, "topics"), "%s needs topics", method)
	}
	return nil
}

func (ps *aclParser) keyGrant(n *yaml.Node, field string) (keyGrant, error) {
	var g keyGrant
	f, err := ps.fields(n, field, "method", "keyType", "keys")
	if err != nil {
		return g, err
	}
	for _, req := range []string{"method", "keyType", "keys"} {
		if f[req] == nil {
			return g, ps.errAt(n, field, "no %s", req)
		}
	}
	method, err := ps.str(f["method"], fieldJoin(field, "method"))
	if err != nil {
		return g, err
	}
	switch {
	case strings.EqualFold(method, "Read"):
		g.methods = store.Read
	case strings.EqualFold(method, "Write"):
		g.methods = store.Write
	case strings.EqualFold(method, "ReadWrite"):
		g.methods = store.Read | store.Write
	default:
		return g, ps.errAt(f["method"], fieldJoin(field, "method"), "unknown method %q (want Read, Write or ReadWrite)", method)
	}
	keyType, err := ps.str(f["keyType"], fieldJoin(field, "keyType"))
	if err != nil {
		return g, err
	}
	var add func(s string) error
	switch {
	case strings.EqualFold(keyType, "Pattern"):
		add = func(s string) error {
			p, err := compileGlob(s, true)
			if err == nil {
				g.patterns = append(g.patterns, p)
			}
			return err
		}
	case strings.EqualFold(keyType, "String"):
		add = func(s string) error {
			k, err := compileExactKey(s)
			if err == nil {
				g.exact = append(g.exact, k)
			}
			return err
		}
	case strings.EqualFold(keyType, "Binary"):
		add = func(s string) error {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return errors.New("not base64")
			}
			g.binary = append(g.binary, string(b))
			return nil
		}
	default:
		return g, ps.errAt(f["keyType"], fieldJoin(field, "keyType"), "unknown key type %q (want Pattern, String or Binary)", keyType)
	}
	count, err := ps.strs(f["keys"], fieldJoin(field, "keys"), func(s string, n *yaml.Node, fld string) error {
		if s == "" {
			return ps.errAt(n, fld, "empty key")
		}
		if err := add(s); err != nil {
			return ps.errAt(n, fld, "key %s: %v", quoteShort(s), err)
		}
		return nil
	})
	if err != nil {
		return g, err
	}
	if count == 0 {
		return g, ps.errAt(f["keys"], fieldJoin(field, "keys"), "no keys")
	}
	return g, nil
}

func (ps *aclParser) users(n *yaml.Node, field string) error {
	if err := ps.plain(n, field); err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return ps.errAt(n, field, "want a mapping of user name to {clientIds: [...]}, found %s", kindName(n))
	}
	ps.policy.users = map[string][]glob.Glob{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := ps.plain(k, field); err != nil {
			return err
		}
		user, err := ps.str(k, field)
		if err != nil {
			return err
		}
		uf := fieldJoin(field, user)
		if _, dup := ps.policy.users[user]; dup {
			return ps.errAt(k, uf, "given twice")
		}
		f, err := ps.fields(v, uf, "clientIds")
		if err != nil {
			return err
		}
		cn := f["clientIds"]
		if cn == nil {
			return ps.errAt(v, uf, "no clientIds")
		}
		globs := []glob.Glob{}
		count, err := ps.strs(cn, fieldJoin(uf, "clientIds"), func(s string, n *yaml.Node, fld string) error {
			g, err := compileGlob(s, false)
			if err != nil {
				return ps.errAt(n, fld, "%v", err)
			}
			globs = append(globs, g)
			return nil
		})
		if err != nil {
			return err
		}
		if count == 0 {
			return ps.errAt(cn, fieldJoin(uf, "clientIds"), "no client ids (remove the user to leave it unbound)")
		}
		ps.policy.users[user] = globs
		ps.policy.bound = append(ps.policy.bound, globs...)
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return "the value " + quoteShort(n.Value)
	}
	return "nothing"
}

func fieldJoin(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

func fieldIndex(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }
