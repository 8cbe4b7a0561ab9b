package broker

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/store"
)

const exampleACL = "../docs/acl.example.yaml"

// decide runs every decision of policy p for (user, id) the way the hook
// does, without a connection.
type decider struct {
	a *authz
	s *session
}

func newDecider(p *aclPolicy, user, id string) decider {
	a := &authz{sessions: map[string]*session{}}
	if p != nil {
		a.policy.Store(p)
	}
	return decider{a: a, s: &session{pr: newPrincipal(user, id)}}
}

func (d decider) connect() bool {
	p, rules := d.a.rulesOf(d.s)
	return p == nil || mayConnect(rules) && p.clientIDAllowed(&d.s.pr)
}
func (d decider) pub(topic string) bool  { return d.a.mayPublish(d.s, topic) }
func (d decider) sub(filter string) bool { return d.a.mayReceive(d.s, filter) }
func (d decider) read(key string) bool   { return d.a.mayKey(d.s, store.Read, []byte(key)) }
func (d decider) write(key string) bool  { return d.a.mayKey(d.s, store.Write, []byte(key)) }

// decision is one checked decision: what, the decision, the one wanted.
type decision struct {
	what      string
	got, want bool
}

func checkDecisions(t *testing.T, ds []decision) {
	t.Helper()
	for _, d := range ds {
		if d.got != d.want {
			t.Errorf("%s: got %v, want %v", d.what, d.got, d.want)
		}
	}
}

func loadExample(t *testing.T) *aclPolicy {
	t.Helper()
	p, _, err := readACLFile(exampleACL)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The documented example loads and means what its comments say.
func TestACLExample(t *testing.T) {
	p := loadExample(t)
	sensor := newDecider(p, "sensor-01", "thermostat1")
	checkDecisions(t, []decision{
		{"sensor connects as thermostat1", sensor.connect(), true},
		{"sensor-01 cannot connect as another id", newDecider(p, "sensor-01", "pump7").connect(), false},
		{"another sensor cannot use sensor-01's id", newDecider(p, "sensor-02", "thermostat1").connect(), false},
		{"another sensor with its own id", newDecider(p, "sensor-02", "pump7").connect(), true},
		{"unknown user has no Connect grant", newDecider(p, "mallory", "m1").connect(), false},
		{"dash-* client id connects whoever the user", newDecider(p, "mallory", "dash-1").connect(), true},
		{"rules user bound to ssrun-*", newDecider(p, "rules", "other").connect(), false},
		{"rules user as ssrun-1", newDecider(p, "rules", "ssrun-1").connect(), true},

		{"own telemetry", sensor.pub("telemetry/thermostat1/temp"), true},
		{"other's telemetry", sensor.pub("telemetry/pump7/temp"), false},
		{"requests", sensor.pub("statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"), true},
		{"forged notification", sensor.pub(notifyRoot + "/70756D7037/command/notify/6B"), false},
		{"own commands", sensor.sub("commands/thermostat1"), true},
		{"all commands", sensor.sub("commands/+"), false},
		{"a response topic that is not quite its hex", sensor.sub("clients/746865726D6F73746174311/x"), false},
		{"own response topic (hex)", sensor.sub("clients/74686572" + "6D6F7374617431/statestore/#"), true},
		{"own response topic (raw)", sensor.sub("clients/thermostat1/services/#"), true},
		{"own notifications", sensor.sub(notifyRoot + "/74686572" + "6D6F7374617431/command/notify/+"), true},
		{"others' notifications", sensor.sub(notifyRoot + "/+/command/notify/+"), false},
		{"ops see everything", newDecider(p, "ops-1", "o").sub("#"), true},
		{"ops still cannot publish into the store space", newDecider(p, "ops-1", "o").pub(notifyRoot + "/00/command/notify/00"), false},

		{"read own config", sensor.read("config/thermostat1"), true},
		{"write own config", sensor.write("config/thermostat1"), false},
		{"read other config", sensor.read("config/pump7"), false},
		{"own device keys, deep", sensor.write("devices/thermostat1/a/b"), true},
		{"other device keys", sensor.read("devices/pump7/a"), false},
		{"rules read set point", newDecider(p, "rules", "ssrun-1").read("thermostat1/setPoint"), true},
		{"rules write set point", newDecider(p, "rules", "ssrun-1").write("thermostat1/setPoint"), false},
		{"rules write target", newDecider(p, "rules", "ssrun-1").write("hvac1/target"), true},
		{"rules binary key", newDecider(p, "rules", "ssrun-1").write("\x00\x01\x02"), true},
		{"rules other binary key", newDecider(p, "rules", "ssrun-1").write("\x00\x01\x03"), false},
		{"ops any key", newDecider(p, "ops-1", "o").write("\xff anything"), true},
	})
}

func TestDefaultPolicy(t *testing.T) {
	d := newDecider(nil, "alice", "myclient")
	hexID := "6D79636C69656E74"
	checkDecisions(t, []decision{
		{"connect", d.connect(), true},
		{"any key", d.write("anything") && d.read("anything"), true},
		{"requests", d.pub("statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"), true},
		{"other topics", d.pub("telemetry/x"), false},
		{"own response (Go)", d.sub("clients/" + hexID + "/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response"), true},
		{"own response (Rust)", d.sub("clients/myclient/services/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response"), true},
		{"own response (.NET)", d.sub("clients/myclient/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"), true},
		{"own responses, shared", d.sub("$share/g/clients/myclient/#"), true},
		{"own notify filter (Rust)", d.sub(notifyRoot + "/" + hexID + "/command/notify/+"), true},
		{"own notify filter (.NET)", d.sub(notifyRoot + "/myclient/command/notify"), true},
		{"own notify filter (.NET) with wildcard", d.sub(notifyRoot + "/myclient/command/notify/#"), false},
		{"#", d.sub("#"), false},
		{"clients/#", d.sub("clients/#"), false},
		{"clients/+/...", d.sub("clients/+/statestore/#"), false},
		{"another's response (Go)", d.sub("clients/6F74686572/#"), false},
		{"prefix of own id is not own", d.sub("clients/myclien/#"), false},
		{"longer id is not own", d.sub("clients/myclientX/#"), false},
		{"others' notifications", d.sub(notifyRoot + "/#"), false},
		{"the request topic", d.sub("statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"), false},
		{"$SYS", d.sub("$SYS/#"), false},
		{"denied wills", d.sub(deniedWillTopic), false},
		// A client id that is another's hex: only the hex forms.
		{"hex-looking id, raw form", newDecider(nil, "bob", hexID).sub("clients/" + hexID + "/#"), false},
		{"hex-looking id, own hex form", newDecider(nil, "bob", hexID).sub("clients/" + "3644373936333643363936353645373" + "4/#"), true},
		{"id statestore, raw form", newDecider(nil, "bob", "statestore").sub("clients/statestore/#"), false},
		{"id '+', raw form", newDecider(nil, "bob", "+").sub("clients/+/#"), false},
		{"id with /, raw form", newDecider(nil, "bob", "a/b").sub("clients/a/b/#"), false},
		{"id '#', .NET form", newDecider(nil, "bob", "#").sub(notifyRoot + "/#/command/notify"), false},
	})
}

func TestGlob(t *testing.T) {
	pr := newPrincipal("alice", "dev*1")
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"*", "", true},
		{"*", "a/b/c", true},
		{"a*", "a", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbcd", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "aéc", true},
		{"a?c", "a\xffc", true},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[!a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"[\\]]", "]", true},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"*a*a*a*b", strings.Repeat("a", 2000), false},
		{"k/{principal.clientId}/*", "k/dev*1/x", true},
		{"k/{principal.clientId}/*", "k/devX1/x", false}, // the id's * is literal
		{"{principal.username}/*", "alice/x", true},
		{"{principal.username}", "alice", true},
		{"{principal.username}", "alicex", false},
		{"{other}", "{other}", true}, // only {principal.…} is special
	} {
		g, err := compileGlob(c.pattern, true)
		if err != nil {
			t.Errorf("%q: %v", c.pattern, err)
			continue
		}
		if got := g.Match([]byte(c.subject), &pr); got != c.want {
			t.Errorf("%q matching %q: %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
	// An empty template value grants nothing.
	g, _ := compileGlob("{principal.username}*", true)
	if g.Match([]byte("x"), &principal{}) {
		t.Error("empty user name matched")
	}
	for _, bad := range []string{"[", "[]", "[a-", "[b-a]", "a\\", "{principal.nope}", "{principal.attributes.city}", "{principal.clientId"} {
		if _, err := compileGlob(bad, true); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

func TestTopicCovers(t *testing.T) {
	pr := newPrincipal("alice", "c1")
	for _, c := range []struct {
		grant, filter string
		want          bool
	}{
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"a/#", "a/+/c", true},
		{"a/#", "a/#", true},
		{"a/#", "b", false},
		{"a/+", "a/b", true},
		{"a/+", "a/+", true},
		{"a/+", "a/#", false},
		{"a/+", "a/b/c", false},
		{"a/b", "a/+", false},
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/{principal.clientId}/#", "a/c1/x", true},
		{"a/{principal.clientId}/#", "a/c2/x", false},
		{"a/{principal.clientId}/#", "a/+/x", false},
		{"u/{principal.username}", "u/alice", true},
	} {
		p, err := compileTopic(c.grant)
		if err != nil {
			t.Errorf("%q: %v", c.grant, err)
			continue
		}
		if got := p.covers(c.filter, &pr); got != c.want {
			t.Errorf("grant %q, filter %q: %v, want %v", c.grant, c.filter, got, c.want)
		}
	}
	// A client id that is not one plain level never fills a template.
	p, _ := compileTopic("a/{principal.clientId}/#")
	for _, id := range []string{"+", "#", "x/y", ""} {
		if pr := newPrincipal("u", id); p.covers("a/"+id+"/z", &pr) || p.covers("a/+/z", &pr) {
			t.Errorf("client id %q filled a template", id)
		}
	}
	for _, bad := range []string{"", "a/#/b", "a+", "a/b#", "a/x{principal.clientId}", "$share/g/a", "a/\x00"} {
		if _, err := compileTopic(bad); err == nil {
			t.Errorf("topic %q compiled", bad)
		}
	}
}

// Every bad ACL file is refused with its file, line and field.
func TestACLFileErrors(t *testing.T) {
	const head = "authorizationPolicies:\n  rules:\n"
	rule := func(body string) string {
		return head + "    - principals: {usernames: [a]}\n" + body
	}
	for _, c := range []struct {
		name, yaml string
		line       int
		field      string
		msg        string
	}{
		{"yaml syntax", "authorizationPolicies: [\n", 1, "", "did not find"},
		{"empty", "", 0, "", "empty file"},
		{"not a mapping", "- 1\n", 1, "", "want a mapping"},
		{"unknown top field", "authorisationPolicies: {}\n", 1, "authorisationPolicies", "unknown field"},
		{"no policies", "users: {}\n", 1, "", "no authorizationPolicies"},
		{"no rules", "authorizationPolicies: {cache: Enabled}\n", 1, "authorizationPolicies", "no rules"},
		{"bad cache", "authorizationPolicies: {cache: Maybe, rules: []}\n", 1, "authorizationPolicies.cache", "Enabled or Disabled"},
		{"both spec and top", "spec: {authorizationPolicies: {rules: []}}\nauthorizationPolicies: {rules: []}\n", 1, "spec", "not both"},
		{"wrong kind", "kind: BrokerAuthentication\nspec: {authorizationPolicies: {rules: []}}\n", 1, "kind", "not BrokerAuthorization"},
		{"no principals", head + "    - brokerResources: [{method: Connect}]\n", 3, "authorizationPolicies.rules[0]", "no principals"},
		{"empty principals", head + "    - principals: {}\n", 3, "authorizationPolicies.rules[0].principals", "empty"},
		{"attributes", head + "    - principals:\n        attributes: [{city: x}]\n", 4, "authorizationPolicies.rules[0].principals.attributes", "not supported"},
		{"bad principal glob", head + "    - principals:\n        usernames: [ok, \"[x\"]\n", 4, "authorizationPolicies.rules[0].principals.usernames[1]", "unterminated"},
		{"principal not a string", head + "    - principals:\n        usernames: [[x]]\n", 4, "authorizationPolicies.rules[0].principals.usernames[0]", "want a string"},
		{"duplicate field", head + "    - principals: {usernames: [a]}\n      principals: {usernames: [b]}\n", 4, "authorizationPolicies.rules[0].principals", "given twice"},
		{"unknown method", rule("      brokerResources:\n        - method: Pub\n          topics: [x]\n"), 5, "authorizationPolicies.rules[0].brokerResources[0].method", "unknown method \"Pub\""},
		{"no method", rule("      brokerResources:\n        - topics: [x]\n"), 5, "authorizationPolicies.rules[0].brokerResources[0]", "no method"},
		{"connect with topics", rule("      brokerResources:\n        - method: Connect\n          topics: [x]\n"), 6, "authorizationPolicies.rules[0].brokerResources[0].topics", "no topics"},
		{"publish without topics", rule("      brokerResources:\n        - method: Publish\n"), 5, "authorizationPolicies.rules[0].brokerResources[0]", "needs topics"},
		{"bad topic", rule("      brokerResources:\n        - method: Subscribe\n          topics:\n            - ok\n            - a/#/b\n"), 8, "authorizationPolicies.rules[0].brokerResources[0].topics[1]", "last level"},
		{"template not a level", rule("      brokerResources:\n        - method: Subscribe\n          topics: [\"a/x{principal.clientId}\"]\n"), 6, "topics[0]", "whole level"},
		{"unknown template", rule("      brokerResources:\n        - method: Subscribe\n          topics: [\"a/{principal.id}\"]\n"), 6, "topics[0]", "unknown template"},
		{"publish into store space", rule("      brokerResources:\n        - method: Publish\n          topics: [clients/statestore/#]\n"), 6, "topics[0]", "nobody but the state store"},
		{"key method", rule("      stateStoreResources:\n        - {method: Delete, keyType: Pattern, keys: [a]}\n"), 5, "stateStoreResources[0].method", "Read, Write or ReadWrite"},
		{"key type", rule("      stateStoreResources:\n        - {method: Read, keyType: Regex, keys: [a]}\n"), 5, "stateStoreResources[0].keyType", "Pattern, String or Binary"},
		{"no keys", rule("      stateStoreResources:\n        - {method: Read, keyType: Pattern, keys: []}\n"), 5, "stateStoreResources[0].keys", "no keys"},
		{"missing keyType", rule("      stateStoreResources:\n        - {method: Read, keys: [a]}\n"), 5, "stateStoreResources[0]", "no keyType"},
		{"bad base64", rule("      stateStoreResources:\n        - {method: Read, keyType: Binary, keys: [\"!!\"]}\n"), 5, "stateStoreResources[0].keys[0]", "not base64"},
		{"bad key glob", rule("      stateStoreResources:\n        - method: Read\n          keyType: Pattern\n          keys:\n            - \"a[\"\n"), 8, "stateStoreResources[0].keys[0]", "unterminated"},
		{"empty key", rule("      stateStoreResources:\n        - {method: Read, keyType: String, keys: [\"\"]}\n"), 5, "stateStoreResources[0].keys[0]", "empty key"},
		{"users not a mapping", "authorizationPolicies: {rules: []}\nusers: [a]\n", 2, "users", "want a mapping"},
		{"user without clientIds", "authorizationPolicies: {rules: []}\nusers:\n  alice: {}\n", 3, "users.alice", "no clientIds"},
		{"user with empty clientIds", "authorizationPolicies: {rules: []}\nusers:\n  alice: {clientIds: []}\n", 3, "users.alice.clientIds", "no client ids"},
		{"user twice", "authorizationPolicies: {rules: []}\nusers:\n  alice: {clientIds: [a]}\n  alice: {clientIds: [b]}\n", 4, "users.alice", "given twice"},
		{"alias", "x: &a [1]\nauthorizationPolicies: *a\n", 1, "", "unknown field"},
		{"alias value", "authorizationPolicies: {rules: []}\nusers:\n  alice: &c {clientIds: [a]}\n  bob: *c\n", 4, "users.bob", "aliases"},
		// A second document was dropped unread, with the rules it held.
		{"second document", "authorizationPolicies: {rules: []}\n---\nusers:\n  alice: {clientIds: [a]}\n", 3, "", "a second YAML document (after ---)"},
		{"malformed second document", "authorizationPolicies: {rules: []}\n---\nusers: [\n", 3, "", "did not find"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseACL("acl.yaml", []byte(c.yaml))
			var fe *ACLFileError
			if !errors.As(err, &fe) || !errors.Is(err, ErrACLFile) {
				t.Fatalf("error %v, want an *ACLFileError", err)
			}
			if fe.File != "acl.yaml" || fe.Line != c.line || !strings.Contains(fe.Field, c.field) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q (line %d, field %q), want line %d, field %q, message with %q", err, fe.Line, fe.Field, c.line, c.field, c.msg)
			}
			if c.line > 0 && !strings.Contains(err.Error(), "acl.yaml:") {
				t.Fatalf("error %q does not name file:line", err)
			}
		})
	}
}

func TestACLFileForms(t *testing.T) {
	for _, doc := range []string{
		"authorizationPolicies:\n  rules: []\n",
		"authorizationPolicies:\n  rules: []\n---\n# an empty document after it\n",
		"apiVersion: mqttbroker.iotoperations.azure.com/v1\nkind: BrokerAuthorization\nmetadata: {name: x, namespace: azure-iot-operations}\nspec:\n  authorizationPolicies:\n    cache: Enabled\n    rules: []\n",
		"authorizationPolicies:\n  rules:\n    - principals: {usernames: [\"*\"]}\n      brokerResources: [{method: connect}]\n      stateStoreResources: [{method: readwrite, keyType: pattern, keys: [\"*\"]}]\n",
	} {
		if _, err := parseACL("acl.yaml", []byte(doc)); err != nil {
			t.Errorf("%q: %v", doc, err)
		}
	}
	// `rules: []` denies everything.
	p, err := parseACL("acl.yaml", []byte("authorizationPolicies: {rules: []}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := newDecider(p, "alice", "a"); d.connect() || d.read("k") {
		t.Fatal("an empty rule list allowed something")
	}
	if _, _, err := readACLFile("testdata/no-such-acl.yaml"); err == nil || !errors.Is(err, ErrACLFile) || !strings.Contains(err.Error(), "no-such-acl.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

// The ACL file is hostile input: no content makes parsing or the checks
// built from it panic.
func FuzzParseACL(f *testing.F) {
	if b, err := os.ReadFile(exampleACL); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"authorizationPolicies: {rules: []}",
		"authorizationPolicies:\n  rules:\n    - principals: {usernames: [\"*\"], clientIds: [\"[a-z]*\"]}\n      brokerResources: [{method: Connect}, {method: Subscribe, topics: [\"a/{principal.clientId}/#\", \"+/b\"]}]\n      stateStoreResources: [{method: Read, keyType: Pattern, keys: [\"*a?[!b]\\\\*{principal.username}\"]}, {method: Write, keyType: String, keys: [\"{principal.clientId}\"]}, {method: ReadWrite, keyType: Binary, keys: [\"AAE=\"]}]\nusers: {alice: {clientIds: [\"a*\"]}}",
		"a: &a [*a]",
		"spec: {authorizationPolicies: {rules: [{principals: {usernames: [x]}}]}}",
		"{{{",
		"authorizationPolicies: {rules: [{principals: {usernames: ['[']}}]}",
	} {
		f.Add([]byte(s))
	}
	// Templates ({principal.*}: parseToken, parseTemplate) in topics and in
	// keys of each keyType, well formed or not.
	rule := func(topic, keyType, key string) string {
		return "authorizationPolicies:\n  rules:\n    - principals: {usernames: [\"*\"]}\n      brokerResources: [{method: Connect}, {method: Publish, topics: [" +
			strconv.Quote(topic) + "]}]\n      stateStoreResources: [{method: ReadWrite, keyType: " + keyType + ", keys: [" + strconv.Quote(key) + "]}]\n"
	}
	for _, tc := range [][3]string{
		{"users/{principal.username}/+", "Pattern", "u/{principal.username}/*"},
		{"{principal.clientId}", "String", "{principal.clientId}{principal.username}"},
		{"t/+", "Pattern", "*{principal.clientId}?[a-z]"},
		{"t/#", "String", "k{principal.clientId}*?[{principal.username}"},
		{"t", "Pattern", "[{principal.clientId}]"},
		{"t", "Pattern", "{principal.clientid}"},
		{"t", "String", "{principal.attributes.floor}"},
		{"t", "String", "a{principal."},
		{"a/{principal.clientId}{principal.username}", "String", "k"},
		{"a/x{principal.clientId}", "Pattern", "k"},
		{"a/{principal.clientid}", "Pattern", "k"},
		{"a/{principal.attributes.floor}", "String", "k"},
		{"a/{principal.clientId", "String", "k"},
		{"a/{principal.username}/#", "Pattern", "{principal.username}\\*"},
		{"{principal.username}/{principal.clientId}", "Binary", "e3ByaW5jaXBhbC5jbGllbnRJZH0="},
	} {
		f.Add([]byte(rule(tc[0], tc[1], tc[2])))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parseACL("fuzz.yaml", data)
		if err != nil {
			var fe *ACLFileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not an *ACLFileError", err)
			}
			return
		}
		// Exercise every check with subjects taken from the input.
		s := string(data)
		for _, id := range []string{"", "a", s[:min(len(s), 12)]} {
			d := newDecider(p, s[len(s)/2:], id)
			d.connect()
			d.pub(s)
			d.sub(s)
			d.read(s)
			d.write(s[len(s)/3:])
		}
	})
}
