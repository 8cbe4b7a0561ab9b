package guest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// rawConn is the plugin's end of a raw session channel (see SessionReady
// in plugin.proto).
type rawConn = wire.Conn[*pb.FromPlugin, *pb.ToPlugin]

// rawDialTimeout bounds dialling the host's raw session socket and sending
// the token: the host listens before Init, so only a stuck host takes long.
const rawDialTimeout = 10 * time.Second

// dialRaw connects to the raw session socket the host offered in Init and
// sends its token first.
func dialRaw(ctx context.Context, socket string, token []byte) (*rawConn, error) {
	ctx, cancel := context.WithTimeout(ctx, rawDialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("raw session: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	if _, err := c.Write(token); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("raw session: send the token: %w", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return wire.NewConn[*pb.FromPlugin](c, func() *pb.ToPlugin { return &pb.ToPlugin{} }), nil
}
