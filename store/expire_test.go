package store

import (
	"testing"
	"time"
)

// Expire reaps what is due on the store's own clock, notifies it, and says
// when the next key expires.
func TestExpireOnAVirtualClock(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	s := New(func() time.Time { return now }, Quota{Keys: -1, Bytes: -1})
	o := &recordingObserver{id: "c"}
	if err := s.keyNotify(o, []byte("a")); err != nil {
		t.Fatal(err)
	}
	for key, px := range map[string]time.Duration{"a": time.Second, "b": 3 * time.Second} {
		if _, _, err := s.set(setArgs{key: []byte(key), value: []byte("v"), px: px, ts: s.clock.Tick()}); err != nil {
			t.Fatal(err)
		}
	}
	if next, ok := s.Expire(); !ok || !next.Equal(now.Add(time.Second)) {
		t.Fatalf("Expire() = %v, %v; want %v", next, ok, now.Add(time.Second))
	}
	now = now.Add(time.Second)
	if next, ok := s.Expire(); !ok || !next.Equal(now.Add(2*time.Second)) {
		t.Fatalf("after a: Expire() = %v, %v; want b's deadline", next, ok)
	}
	if _, _, ok := s.get([]byte("a")); ok {
		t.Fatal("a is still there")
	}
	if len(o.got) != 2 || o.got[1].Op != "DELETE" || string(o.got[1].Key) != "a" {
		t.Fatalf("notifications %+v, want SET a then DELETE a", o.got)
	}
	now = now.Add(2 * time.Second)
	if _, ok := s.Expire(); ok {
		t.Fatal("Expire() reports a deadline with no key left to expire")
	}
}

// recordingObserver keeps the notifications of its registrations.
type recordingObserver struct {
	id  string
	got []Notification
}

func (o *recordingObserver) ClientID() string      { return o.id }
func (o *recordingObserver) Notify(n Notification) { o.got = append(o.got, n) }
