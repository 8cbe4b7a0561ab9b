package lua

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// Results as Lua 5.1's reference implementation gives them.
func TestPatterns(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		// find
		{`("hello world"):find("wor")`, "number:7 | number:9"},
		{`("hello world"):find("o", 5)`, "number:5 | number:5"},
		{`("hello world"):find("o", 6)`, "number:8 | number:8"},
		{`("hello"):find("l+")`, "number:3 | number:4"},
		{`("hello"):find("xyz")`, "nil:nil"},
		{`("a.b"):find(".", 1, true)`, "number:2 | number:2"},
		{`("a.b"):find("%.")`, "number:2 | number:2"},
		{`("hello"):find("")`, "number:1 | number:0"},
		{`("hello"):find("", 10)`, "number:6 | number:5"},
		{`("hello"):find("l", -2)`, "number:4 | number:4"},
		{`("hello"):find("h", -100)`, "number:1 | number:1"},
		{`("key=value"):find("(%w+)=(%w+)")`, "number:1 | number:9 | string:key | string:value"},
		{`("hello"):find("^h")`, "number:1 | number:1"},
		{`("hello"):find("^e")`, "nil:nil"},
		{`("hello"):find("o$")`, "number:5 | number:5"},
		{`("a$b"):find("$b")`, "number:2 | number:3"},
		{`("f(a(b)c)d"):find("%b()")`, "number:2 | number:8"},
		{`("THE (quick) fox"):find("%f[%a]%a+", 4)`, "number:6 | number:10"},
		{`("hello"):find("()ll()")`, "number:3 | number:4 | number:3 | number:5"},
		{`("a\0b"):find("\0", 1, true)`, "number:2 | number:2"},
		{`string.find(12345, 34)`, "number:3 | number:4"},
		// match
		{`("key = value"):match("(%w+)%s*=%s*(%w+)")`, "string:key | string:value"},
		{`("2024-01-15"):match("(%d+)-(%d+)-(%d+)")`, "string:2024 | string:01 | string:15"},
		{`("hello"):match(".-l")`, "string:hel"},
		{`("hello"):match(".*l")`, "string:hell"},
		{`("  trim me  "):match("^%s*(.-)%s*$")`, "string:trim me"},
		{`("abc"):match("((a)(b))")`, "string:ab | string:a | string:b"},
		{`("aaa"):match("a-b")`, "nil:nil"},
		{`("abcabc"):match("(abc)%1")`, "string:abc"},
		{`("[test]"):match("%[(.*)%]")`, "string:test"},
		{`("hello"):match("()")`, "number:1"},
		{`("abc"):match("[a-b]+")`, "string:ab"},
		{`("abc"):match("[^a]+")`, "string:bc"},
		{`("a]b"):match("[]]")`, "string:]"},
		{`("a-b"):match("[a%-]+")`, "string:a-"},
		{`("xA1 b2"):match("%u%d")`, "string:A1"},
		{`("x\0y"):match("%z") == "\0"`, "boolean:true"},
		{`("0xFF"):match("%x+", 3)`, "string:FF"},
		{`("a,b"):match("%p")`, "string:,"},
		{`("a\nb"):match("%c") == "\n"`, "boolean:true"},
		{`("abc123"):match("%D+")`, "string:abc"},
		{`("ab12"):match("%W")`, "nil:nil"},
		{`("hello world"):match("%S+$")`, "string:world"},
		{`("aXb"):match("%l%u%l")`, "string:aXb"},
		{`("colour"):match("colou?r")`, "string:colour"},
		{`("color"):match("colou?r")`, "string:color"},
		{`("THE (quick) fox"):match("%f[%a](%a+)%f[%A]", 5)`, "string:quick"},
		// gmatch
		{`(function() local t = {} for w in ("one two three"):gmatch("%a+") do t[#t+1] = w end return table.concat(t, ",") end)()`, "string:one,two,three"},
		{`(function() local t = {} for k, v in ("a=1, b=2"):gmatch("(%w+)=(%w+)") do t[#t+1] = k .. v end return table.concat(t, ",") end)()`, "string:a1,b2"},
		{`(function() local n = 0 for w in ("abc"):gmatch("") do n = n + 1 end return n end)()`, "number:4"},
		{`(function() local t = {} for w in ("a^ab"):gmatch("^a") do t[#t+1] = w end return table.concat(t, ",") end)()`, "string:^a"},
		{`(function() local t = {} for p in ("abc"):gmatch("()b") do t[#t+1] = p end return t[1], t[2] end)()`, "number:2 | nil:nil"},
		// gsub
		{`("hello world"):gsub("o", "0")`, "string:hell0 w0rld | number:2"},
		{`("hello world"):gsub("(%w+)", "<%1>")`, "string:<hello> <world> | number:2"},
		{`("hello"):gsub("", "-")`, "string:-h-e-l-l-o- | number:6"},
		{`("abc"):gsub("%w", "%0%0")`, "string:aabbcc | number:3"},
		{`("hello world"):gsub("%w+", {hello = "HI"})`, "string:HI world | number:2"},
		{`("hello world"):gsub("%w+", string.upper)`, "string:HELLO WORLD | number:2"},
		{`("hello world"):gsub("%w+", function(w) if w == "world" then return false end return 1 end)`, "string:1 world | number:2"},
		{`("abc"):gsub("b", "%%")`, "string:a%c | number:1"},
		{`("abc"):gsub("%w", "%q")`, "string:qqq | number:3"},
		{`("abc"):gsub("", "x", 2)`, "string:xaxbc | number:2"},
		{`("hello"):gsub("l", "L", 1)`, "string:heLlo | number:1"},
		{`("hello"):gsub("l", "L", 0)`, "string:hello | number:0"},
		{`("^hello"):gsub("^h", "H")`, "string:^hello | number:0"},
		{`("hello"):gsub("^h", "H")`, "string:Hello | number:1"},
		{`("hello"):gsub("^", ">")`, "string:>hello | number:1"},
		{`("ab"):gsub("()", "%1")`, "string:1a2b3 | number:3"},
		{`("a b"):gsub(" ", 5)`, "string:a5b | number:1"},
		{`("x=1"):gsub("(%w)=(%w)", "%2=%1")`, "string:1=x | number:1"},
		{`("\0\1"):gsub("%z", "z")`, "string:z\x01 | number:1"},
		// errors (the pcall message, minus the position)
		{`select(2, pcall(string.find, "a", "%"))`, "string:malformed pattern (ends with '%')"},
		{`select(2, pcall(string.find, "a", "[a"))`, "string:malformed pattern (missing ']')"},
		{`select(2, pcall(string.find, "a", "(a"))`, "string:unfinished capture"},
		{`select(2, pcall(string.find, "a", "%a)"))`, "string:invalid pattern capture"},
		{`select(2, pcall(string.find, "a", "%1"))`, "string:invalid capture index"},
		{`select(2, pcall(string.find, "a", "%b"))`, "string:unbalanced pattern"},
		{`select(2, pcall(string.find, "a", "%fa"))`, "string:missing '[' after '%f' in pattern"},
		{`select(2, pcall(string.find, "a", string.rep("()", 33)))`, "string:too many captures"},
		{`select(2, pcall(string.find, string.rep("a", 300), string.rep("a?", 300)))`, "string:pattern too complex"},
		{`select(2, pcall(string.gsub, "abc", ".", {a = 1, b = true}))`, "string:invalid replacement value (a boolean)"},
		{`select(2, pcall(string.gsub, "x", "x", "%2"))`, "string:invalid capture index"},
	} {
		got := evalRule(t, abitest.New(), tc.expr)
		if strings.HasPrefix(tc.expr, "select(2, pcall(") {
			got = trimPosition(got)
		}
		if got != tc.want {
			t.Errorf("%s\n got %q\nwant %q", tc.expr, got, tc.want)
		}
	}
}

// trimPosition drops "file:line: " from a shown error message.
func trimPosition(shown string) string {
	if _, rest, ok := strings.Cut(shown, "verb.lua:"); ok {
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			return "string:" + msg
		}
	}
	return shown
}

func TestPatternDeadline(t *testing.T) {
	// Exponential backtracking: the reference implementation takes 2^30
	// steps here; the deadline stops it and the rule goes on.
	h := abitest.New()
	s := startRule(t, `
function on_event(ev)
  if ev.value == "bomb" then
    string.find(string.rep("a", 30), string.rep("a?", 30) .. string.rep("a", 30))
  end
  print("handled " .. ev.value)
end`, h, abi.Limits{CallTimeout: 50 * time.Millisecond})
	err := s.Handle(context.Background(), setEvent("k", "bomb"))
	wantErr(t, err, abi.ErrTimeout, 4)
	if err := s.Handle(context.Background(), setEvent("k", "next")); err != nil {
		t.Fatal(err)
	}
	if l := logs(h); len(l) != 1 || l[0] != "handled next" {
		t.Errorf("logs %q", l)
	}
}

func TestGsubManyMatches(t *testing.T) {
	// One pass over the subject (gopher-lua's gsub copies it per match:
	// 6.6 s for this one).
	h := abitest.New()
	s := startRule(t, `
function on_event(ev)
  local r, n = string.gsub(string.rep("x", 100000), "x", "yz")
  print(#r, n, r:sub(1, 4))
end`, h, abi.Limits{CallTimeout: time.Minute})
	if err := s.Handle(context.Background(), setEvent("k", "v")); err != nil {
		t.Fatal(err)
	}
	if l := logs(h); len(l) != 1 || l[0] != "200000\t100000\tyzyz" {
		t.Errorf("logs %q", l)
	}
}

func TestGsubMemoryCap(t *testing.T) {
	// The account alone (no call).
	st := newState(Config{}.withDefaults(), abitest.New(), 1<<20)
	defer st.L.Close()
	err := st.L.DoString(`string.gsub(string.rep("x", 1000), "x", string.rep("y", 2000))`)
	if err == nil || !strings.Contains(err.Error(), "string.gsub: ") || !strings.Contains(err.Error(), "memory limit of 1048576 bytes") {
		t.Errorf("gsub cap: %v", err)
	}

	for _, code := range []string{
		`string.gsub(string.rep("x", 1000), "x", string.rep("y", 10000))`,
		`string.gsub(string.rep("x", 1000), "x+", string.rep("%0", 10000))`,
		`string.gsub(string.rep("x", 1000), "x", function() return string.rep("y", 2000) end)`,
	} {
		_, err := compileRule(t, New(Config{}), "gsub.lua", code+"\nfunction on_event() end").Start(context.Background(), abitest.New(), abi.Limits{MemoryBytes: 1 << 20})
		if !errors.Is(err, abi.ErrMemory) {
			t.Errorf("%s: %v, want ErrMemory", code, err)
		}
	}
}

// patternInvariants checks find, match, gsub and gmatch against each
// other for subject s and pattern p.
const patternInvariants = `
local s, p = ...
local ok1, i, j = pcall(string.find, s, p)
local ok2, m = pcall(string.match, s, p)
-- without special characters find searches plainly; match still parses ")"
local plain = not p:find("[%^%$%*%+%?%.%(%[%%%-]")
assert(plain or ok1 == ok2, "find and match disagree on failing")
if ok1 and ok2 then
  assert((i == nil) == (m == nil), "find and match disagree on matching")
  assert(i == nil or (i >= 1 and j >= i - 1 and j <= #s), "find out of range")
end
local ok3, r, n = pcall(string.gsub, s, p, "%0")
if ok1 and i == nil and not plain then assert(ok3 and n == 0, "gsub matched what find did not") end
if ok3 then
  assert(r == s, "gsub with %0 changed the subject")
  if ok1 and not plain then assert((n > 0) == (i ~= nil), "gsub and find disagree") end
  if p:sub(1, 1) ~= "^" then
    local ok4, count = pcall(function() -- fails where captures are malformed
      local c = 0
      for _ in s:gmatch(p) do c = c + 1 end
      return c
    end)
    assert(not ok4 or count == n, "gmatch and gsub count differently")
  end
end
`

// FuzzPattern runs the matcher on arbitrary patterns and subjects: no Go
// panic, and find, match, gsub and gmatch agree.
func FuzzPattern(f *testing.F) {
	for _, seed := range [][2]string{
		{"hello world", "(%w+)"}, {"key = value", "^(%w+)%s*=%s*(%w+)$"}, {"f(a(b)c)d", "%b()"},
		{"THE (quick) fox", "%f[%a]%a+"}, {"abcabc", "(abc)%1"}, {"aaa", "a-b"}, {"", ""},
		{"a]b", "[]]"}, {"x\x00y", "%z"}, {"abc", "()"}, {"aaaaaaaaaaaaaaaaaaaa", "a?a?a?a?a?a?a?a?a?a?aaaaaaaaaa"},
		{"a", "%"}, {"a", "[a"}, {"a", "(a"}, {"a", "%1"}, {"ab", "[%a-z]"}, {"a-z", "[a-]"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, s, p string) {
		st := newState(Config{}.withDefaults(), abitest.New(), 1<<20)
		defer st.L.Close()
		fn, err := st.L.LoadString(patternInvariants)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		st.L.SetContext(ctx)
		err = st.L.CallByParam(glua.P{Fn: fn, Protect: true}, glua.LString(s), glua.LString(p))
		if err != nil && ctx.Err() == nil {
			t.Fatalf("find/match/gsub/gmatch(%q, %q): %v", s, p, err)
		}
	})
}
