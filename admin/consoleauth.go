package admin

import (
	"html/template"
	"net/http"
	"strings"
	"time"
)

// A browser cannot put a bearer token in the header of a page it opens, nor
// of an EventSource: the console's login form (served with the 401 of a
// page asked for without the token) posts the token once, and the answer
// sets it in a cookie that only this origin's requests carry (HttpOnly,
// SameSite=Strict), checked on every page, API call and stream as the
// header is (Server.carriesToken).

const (
	tokenCookie   = "ssrun_admin_token"
	loginPath     = "/console/login"
	cookieMaxAge  = 12 * time.Hour
	maxLoginBytes = 4 << 10
)

// wantsPage reports whether r is a browser's request for a page.
func wantsPage(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html")
}

var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ssrun console: token</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/console/login.css"></head>
<body><main class="login"><h1>ssrun console</h1>
<p>This admin endpoint needs its token (the content of <code>--admin-token-file</code>).</p>
<form method="post" action="` + loginPath + `"><input type="hidden" name="next" value="{{.}}">
<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Open</button></form></main></body></html>
`))

// loginPage answers 401 with the login form, which returns to next.
func loginPage(w http.ResponseWriter, next string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	setPageHeaders(w)
	w.WriteHeader(http.StatusUnauthorized)
	_ = loginTemplate.Execute(w, next) // the client went away: nothing to do
}

// loginHandler takes the posted token: right, it is set in the cookie and
// the browser goes back to the page it asked for; wrong, 401 again; from
// an address that sent too many wrong tokens, 429 (loginlimit.go).
func (s *Server) loginHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src := source(r)
		if wait := s.fails.blocked(src); wait > 0 {
			tooManyFailures(w, wait)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxLoginBytes)
		if err := r.ParseForm(); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "a login is a small form: " + err.Error()})
			return
		}
		next := safeNext(r.PostForm.Get("next"))
		if s.token == nil || !s.tokenIs(strings.TrimSpace(r.PostForm.Get("token"))) {
			if s.token != nil {
				s.fails.fail(src)
			}
			loginPage(w, next)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: strings.TrimSpace(r.PostForm.Get("token")), Path: "/",
			MaxAge: int(cookieMaxAge.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, next, http.StatusSeeOther)
	})
}

// safeNext returns next, a path of this server to go back to after the
// login, or "/" when it is anything else (another site: //host, /\host).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	return next
}

// setPageHeaders forbids a page anything but this origin's own scripts,
// styles and requests, and framing.
func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}
