package admin

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"path"

	"github.com/ssrun/ssrun/protocol"
)

// The console's pages: one HTML page, a script and a style sheet, written
// by hand and embedded in the binary (no build step, nothing fetched from
// elsewhere). The script draws every page from the JSON API with DOM text
// nodes only, so a key or value holding HTML is shown as text.

//go:embed console
var consoleFiles embed.FS

// consoleAsset serves one embedded file of the console.
func consoleAsset(name string) http.Handler {
	b, err := fs.ReadFile(consoleFiles, path.Join("console", name))
	if err != nil {
		panic("admin: console asset " + name + " not embedded: " + err.Error()) // a build mistake
	}
	ctype := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}[path.Ext(name)]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Cache-Control", "no-cache")
		setPageHeaders(w)
		_, _ = w.Write(b) // the client went away: nothing to do
	})
}

// Register serves the console on s: the page at /, its files under
// /console/, its API under /console/api/ and /whynot, all behind the
// server's token. src returns the host once its rules are loaded (nil
// before: 503), keys the store client (nil: not connected yet, 503).
func (c *Console) Register(s *Server, src func() ConsoleSource, keys func() KeySource) {
	registerShell(s, rulesPages)

	withSrc := func(h func(ConsoleSource) http.Handler) http.Handler {
		return whenThere(src, "the rules are not loaded yet", h)
	}
	withKeys := func(h func(KeySource, WhySource) http.Handler) http.Handler {
		return withSrc(func(cs ConsoleSource) http.Handler {
			if ks := keys(); ks != nil {
				return h(ks, cs)
			}
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusServiceUnavailable, ErrorDoc{Error: "no state store client yet"})
			})
		})
	}
	s.Handle("GET /console/api/rules", withSrc(c.rulesHandler))
	s.Handle("GET /console/api/rule", withSrc(c.ruleHandler))
	s.Handle("GET /console/api/timers", withSrc(timersHandler))
	s.Handle("GET /console/api/group", withSrc(groupHandler))
	s.Handle("GET /console/api/events", c.eventsHandler())
	s.Handle("GET /console/api/stream", c.streamHandler(s.ShuttingDown()))
	s.Handle("GET /console/api/keys", withKeys(func(ks KeySource, _ WhySource) http.Handler {
		return keysHandler(func(ctx context.Context, pattern, token []byte) ([][]byte, []byte, error) {
			return ks.ScanPage(ctx, pattern, token, protocol.ScanOptions{})
		}, "the store")
	}))
	s.Handle("GET /console/api/key", withKeys(keyHandler))
	s.Handle("GET /whynot", withSrc(func(cs ConsoleSource) http.Handler { return c.whyNotHandler(cs) }))
}

// The pages of each console, in the order of its menu (the first is
// shown at /): the script shows only those GET /console/api/pages names.
var (
	rulesPages  = []string{"rules", "events", "keys", "why", "whynot", "timers", "group"}
	brokerPages = []string{"keys", "clients"}
)

// registerShell serves what every console shares: the page, its files, the
// login and the list of its pages.
func registerShell(s *Server, pages []string) {
	s.Handle("GET /{$}", consoleAsset("index.html"))
	s.Handle("GET /console/app.js", consoleAsset("app.js"))
	s.Handle("GET /console/style.css", consoleAsset("style.css"))
	s.HandleOpen("GET /console/login.css", consoleAsset("login.css"))
	s.HandleOpen("POST "+loginPath, s.loginHandler())
	s.Handle("GET /console/api/pages", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"pages": pages})
	}))
}

// whenThere serves h of what src returns, or 503 saying missing while src
// returns nil.
func whenThere[S comparable](src func() S, missing string, h func(S) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var none S
		if v := src(); v != none {
			h(v).ServeHTTP(w, r)
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, ErrorDoc{Error: missing})
	})
}
