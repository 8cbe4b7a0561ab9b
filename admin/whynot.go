package admin

import (
	"net/http"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/glob"
)

// Why not: for a key and a rule, why the rule did not react to the key's
// last change. The answer puts together what the console saw happen to the
// pair (a run, or a skip with its reason) and what the host says of the
// rule now (state, watches, permissions, ownership, dry run).

// The codes of a WhyNotReason.
const (
	WhyNotReacted    = "reacted"      // it did: the last event of the key it got, it handled
	WhyNotFailing    = "failing"      // it got the event and its handler failed
	WhyNotLoading    = "loading"      // no rule of that name is loaded: still loading, or no such file
	WhyNotLoadFailed = "load_failed"  // its file failed to load: nothing of it runs
	WhyNotOwner      = "not_owner"    // another host of the group runs it
	WhyNotDisabled   = "disabled"     // disabled after repeated failures
	WhyNotPermission = "permission"   // its watch permission does not allow the key
	WhyNotWatched    = "not_watched"  // it watches no such key (no pattern matched)
	WhyNotEcho       = "echo"         // the change was its own write's echo
	WhyNotDamped     = "damped"       // the feedback-loop damper dropped the change
	WhyNotMailbox    = "mailbox_full" // its mailbox was full
	WhyNotUnwatched  = "unwatched"    // it stopped watching the key before the event's turn
	WhyNotCoalesced  = "coalesced"    // a newer change of the key replaced it in the mailbox
	WhyNotDryRun     = "dry_run"      // it reacts, but its writes never reach the store
	WhyNotNoRecord   = "no_record"    // it watches the key, and nothing of it is remembered
)

// WhyNotReason is one reason in a WhyNotDoc.
type WhyNotReason struct {
	Code string `json:"code"`
	Text string `json:"text"`
	// Entry is what the console saw of the pair, when the reason comes
	// from it.
	Entry *Entry `json:"entry,omitempty"`
}

// WhyNotDoc is the answer of GET /whynot?key=K&rule=R (and `ssrun why K
// --rule R -o json`): the reasons, the first the main one.
type WhyNotDoc struct {
	Key     string         `json:"key"`
	Rule    string         `json:"rule"`
	Reasons []WhyNotReason `json:"reasons"`
}

// WhyNotSource is what the answer is made of: a *host.Host.
type WhyNotSource interface {
	Status() []host.RuleStatus
	RuleConfigOf(path string) (host.RuleConfig, bool)
	DryRun() bool
}

// WhyNot answers why rule (a file name) did not react to key's last change.
func (c *Console) WhyNot(src WhyNotSource, key, rule string) WhyNotDoc {
	doc := WhyNotDoc{Key: key, Rule: rule}
	add := func(code, text string, e *Entry) {
		doc.Reasons = append(doc.Reasons, WhyNotReason{Code: code, Text: text, Entry: e})
	}
	var st *host.RuleStatus
	for _, s := range src.Status() {
		if filepath.Base(s.Path) == rule {
			st = &s
			break
		}
	}
	switch {
	case st == nil:
		add(WhyNotLoading, "no rule "+strconv.Quote(rule)+" is loaded: it is still loading (its start has not returned), or there is no such rule file", nil)
		return doc
	case st.State == host.StateLoadFailed:
		add(WhyNotLoadFailed, "its file failed to load, nothing of it runs: "+st.LastError, nil)
		return doc
	case st.State == host.StateStandby:
		add(WhyNotOwner, "another host of the group runs this rule; this host is on standby for it", nil)
		return doc
	}
	last, seen := c.last(rule, key)
	damped, wasDamped := c.last("", key)
	if wasDamped && (!seen || damped.Seq > last.Seq) {
		add(WhyNotDamped, "the feedback-loop damper dropped the change "+damped.Version+": rules kept triggering each other", &damped)
	}
	if seen && !(wasDamped && damped.Seq > last.Seq) {
		e := last
		switch {
		case e.Kind == "run" && e.Err != "":
			add(WhyNotFailing, "it got the change "+e.Version+" and its handler failed: "+e.Err, &e)
		case e.Kind == "run":
			add(WhyNotReacted, "it did react: it handled the change "+e.Version, &e)
		case e.Reason == string(host.SkipEcho):
			add(WhyNotEcho, "the change "+e.Version+" was the echo of the rule's own write, which it does not get (watch with self to get it)", &e)
		case e.Reason == string(host.SkipMailboxFull):
			add(WhyNotMailbox, "its mailbox was full when the change "+e.Version+" came: the event was dropped", &e)
		case e.Reason == string(host.SkipDisabled):
			add(WhyNotDisabled, "it was disabled when the change "+e.Version+" came", &e)
		case e.Reason == string(host.SkipCoalesced):
			add(WhyNotCoalesced, "the change "+e.Version+" waited in its mailbox and was coalesced into version "+e.Into+
				", a newer change of the key, which the rule gets instead (mode latest or restart, or a full mailbox)", &e)
		case e.Reason == string(host.SkipUnwatched):
			add(WhyNotUnwatched, "it no longer watched the key when the change "+e.Version+" reached it", &e)
		case e.Outcome == OutcomeDenied:
			add(WhyNotPermission, "its watch of the key was refused: "+e.Reason+" (ssrun.yaml: watch)", &e)
		}
	}
	if st.Disabled && !slices.ContainsFunc(doc.Reasons, func(r WhyNotReason) bool { return r.Code == WhyNotDisabled }) {
		add(WhyNotDisabled, "it is disabled after repeated failures: "+st.LastError, nil)
	}
	if !slices.Contains(st.Watches, key) && !slices.ContainsFunc(st.Patterns, func(p string) bool { return patternMatches(p, key) }) {
		cfg, _ := src.RuleConfigOf(st.Path)
		if !host.Allowed(cfg.Watch, key) && !slices.ContainsFunc(doc.Reasons, func(r WhyNotReason) bool { return r.Code == WhyNotPermission }) {
			add(WhyNotPermission, "its watch permission does not allow the key (ssrun.yaml: watch)", nil)
		}
		text := "it does not watch the key: its watches are " + quoteList(st.Watches)
		if len(st.Patterns) > 0 {
			text += ", its patterns " + quoteList(st.Patterns)
		}
		add(WhyNotWatched, text, nil)
	}
	if src.DryRun() {
		add(WhyNotDryRun, "ssrun runs as a dry run: the rule's writes never reach the store", nil)
	}
	if len(doc.Reasons) == 0 {
		add(WhyNotNoRecord, "it watches the key, and the console saw no change of it reach the rule since it started (or has forgotten it)", nil)
	}
	return doc
}

// patternMatches reports whether the rule's watched pattern (the glob of
// watch_pattern, as the host compiled it when the rule watched it) matches key.
func patternMatches(pattern, key string) bool {
	g, err := glob.Compile(pattern, nil)
	return err == nil && g.MatchString(key, nil)
}

func quoteList(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += strconv.Quote(s)
	}
	return out
}

// whyNotHandler serves GET /whynot?key=K&rule=R: the WhyNotDoc, as JSON.
func (c *Console) whyNotHandler(src WhyNotSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !q.Has("key") || q.Get("rule") == "" {
			writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "missing a parameter: /whynot?key=KEY&rule=RULE"})
			return
		}
		writeJSON(w, http.StatusOK, c.WhyNot(src, q.Get("key"), q.Get("rule")))
	})
}
