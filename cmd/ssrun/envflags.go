package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Every flag of the running command can also come from the environment,
// for containers: --shutdown-timeout from SSRUN_SHUTDOWN_TIMEOUT, --log-format
// from SSRUN_LOG_FORMAT, and so on (SSRUN_, then the flag's name in upper
// case with "-" as "_"). A flag given on the command line wins over its
// variable. The connection settings of `kv` and `run` also read the AIO_*
// variables of the Azure IoT Operations SDKs (see connSettings), which
// SSRUN_* variables, like flags, override. Variables for flags the running
// command does not have are ignored (one environment may serve `broker` and
// `run`).

// envName is the variable that may hold the flag named flag.
func envName(flag string) string {
	return "SSRUN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyFlagEnv sets each flag of fs not given on the command line from its
// variable, found by lookup. It returns the flags so set, by name, with
// their variables; errors name the variable and its value.
func applyFlagEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) (map[string]string, error) {
	set := map[string]string{}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || f.Name == "version" {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (for --%s): %w", name, v, f.Name, err))
			return
		}
		set[f.Name] = name
	})
	return set, errors.Join(errs...)
}

// flagSource names where the value of the flag named flag came from, for
// error messages: its variable, or the flag itself.
func (a *app) flagSource(flag string) string {
	if v, ok := a.fromEnv[flag]; ok {
		return v
	}
	return "--" + flag
}
