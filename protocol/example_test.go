package protocol_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/protocol"
)

// startBroker runs the embedded state store on a free loopback port.
func startBroker() *broker.Broker {
	b, err := broker.New(broker.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(); err != nil {
		log.Fatal(err)
	}
	return b
}

func connect(ctx context.Context, addr, id string) *protocol.Client {
	c, err := protocol.New(ctx, protocol.Config{Servers: []string{addr}, ClientID: id, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.AwaitConnection(ctx); err != nil {
		log.Fatal(err)
	}
	return c
}

// Set, get and a conditional set.
func Example() {
	b := startBroker()
	defer b.Close()
	ctx := context.Background()
	c := connect(ctx, b.Addr(), "example")
	defer c.Close()

	set, err := c.Set(ctx, []byte("greeting"), []byte("hello"), protocol.SetOptions{})
	if err != nil {
		log.Fatal(err)
	}
	got, err := c.Get(ctx, []byte("greeting"), protocol.CallOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, same version: %v\n", got.Value, got.Version == set.Version)

	again, err := c.Set(ctx, []byte("greeting"), []byte("bonjour"), protocol.SetOptions{Condition: protocol.CondNX})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("NX applied: %v, stored version returned: %v\n", again.Applied, again.Version == set.Version)
	// Output:
	// hello, same version: true
	// NX applied: false, stored version returned: true
}

// Watch a key: every change arrives on Events in order, with its version.
func ExampleClient_KeyNotify() {
	b := startBroker()
	defer b.Close()
	ctx := context.Background()
	watcher := connect(ctx, b.Addr(), "watcher")
	defer watcher.Close()
	writer := connect(ctx, b.Addr(), "writer")
	defer writer.Close()

	if err := watcher.KeyNotify(ctx, []byte("door"), protocol.CallOptions{}); err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"open", "closed"} {
		if _, err := writer.Set(ctx, []byte("door"), []byte(v), protocol.SetOptions{}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := writer.Del(ctx, []byte("door"), protocol.DelOptions{}); err != nil {
		log.Fatal(err)
	}
	for n := 0; n < 3; {
		ev := <-watcher.Events()
		if ev.Kind == protocol.EventNotify {
			fmt.Println(ev.Op, string(ev.Key), string(ev.Value))
			n++
		}
	}
	// Output:
	// SET door open
	// SET door closed
	// DELETE door
}

// A lease (SET NEX PX) whose version fences the writes made under it: a
// writer holding an older token is refused by the store.
func ExampleSetOptions_fencingToken() {
	b := startBroker()
	defer b.Close()
	ctx := context.Background()
	c := connect(ctx, b.Addr(), "leader")
	defer c.Close()

	lease := func() protocol.SetResult {
		r, err := c.Set(ctx, []byte("lock"), []byte("leader"), protocol.SetOptions{Condition: protocol.CondNEX, Expiry: 10 * time.Second})
		if err != nil || !r.Applied {
			log.Fatal(r, err)
		}
		return r
	}
	old := lease()
	renewed := lease() // a renewal: a new, larger token
	if _, err := c.Set(ctx, []byte("config"), []byte("v2"), protocol.SetOptions{FencingToken: renewed.Version}); err != nil {
		log.Fatal(err)
	}
	_, err := c.Set(ctx, []byte("config"), []byte("stale"), protocol.SetOptions{FencingToken: old.Version})
	fmt.Println(err)
	// Output:
	// protocol: set key "config": state store error: the request fencing token is a lower version than the fencing token protecting the resource
}
