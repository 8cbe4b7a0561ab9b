package admin

import (
	"net/http"
	"strconv"

	"github.com/ssrun/ssrun/host/provenance"
)

// WhySource answers which rule last wrote a key: a *host.Host.
type WhySource interface {
	Why(key string) (provenance.Write, bool)
}

// WhyHandler serves GET /why?key=K: the provenance.Write journal entry of K, as
// JSON (the rule, op, value, version and time of the last write a rule
// made to K, the event it handled and the chain back to the outside write
// that started it). A missing key parameter is 400; a key no rule wrote
// since the host started (or that the bounded journal forgot) is 404.
func WhyHandler(src WhySource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !onlyGet(w, r) {
			return
		}
		q := r.URL.Query()
		if !q.Has("key") {
			writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "missing the key parameter: /why?key=KEY"})
			return
		}
		key := q.Get("key")
		wr, ok := src.Why(key)
		if !ok {
			writeJSON(w, http.StatusNotFound, ErrorDoc{Error: "no rule wrote " + strconv.Quote(key) +
				" since ssrun started (or the journal has forgotten it: it keeps the last write of the most recently written keys)"})
			return
		}
		writeJSON(w, http.StatusOK, wr)
	})
}
