package plugin

import goplugin "github.com/hashicorp/go-plugin"

// pluginClient is go-plugin's *Client as a script uses it for one start of
// a plugin: Client connects to the plugin, starting its process, and Kill
// asks it to exit, kills it if it does not, and waits until it is gone.
type pluginClient interface {
	Client() (goplugin.ClientProtocol, error)
	Kill()
}

// connector makes the client of one plugin start from the configuration
// go-plugin would start the process with. Tests set Runtime.connect to one
// that serves the rule in their own process instead (inprocess_test.go).
type connector func(cfg *goplugin.ClientConfig) pluginClient

// newClient returns the client of one start of a plugin: a go-plugin
// Client of the process cfg describes, unless the runtime has a connector.
func (r *Runtime) newClient(cfg *goplugin.ClientConfig) pluginClient {
	if r.connect != nil {
		return r.connect(cfg)
	}
	return goplugin.NewClient(cfg)
}
