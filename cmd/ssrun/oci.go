package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/ocirules"
)

// Rules from an OCI registry (see package ocirules): `ssrun push DIR REF`,
// and oci://REF where dev, run, check and test take a rules folder.

// registryFlags are how a command reaches a registry.
type registryFlags struct {
	insecure bool
	config   string
	caFile   string
}

func (f *registryFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.insecure, "insecure-registry", false, "talk to the registry over plain HTTP, without TLS (a registry on loopback or a lab network)")
	cmd.Flags().StringVar(&f.config, "registry-config", "", "registry credentials: a Docker config file or a Kubernetes pull secret's .dockerconfigjson (default: Docker's, $DOCKER_CONFIG/config.json or ~/.docker/config.json)")
	cmd.Flags().StringVar(&f.caFile, "registry-ca-file", "", "PEM certificates of the authorities that sign the registry's certificate (default: the system's)")
}

// options returns the client options of f.
func (f *registryFlags) options(a *app) ocirules.Options {
	return ocirules.Options{PlainHTTP: f.insecure, CAFile: f.caFile, RegistryConfig: f.config, Logger: a.log}
}

// ociFlags are the flags of the commands that take oci://REF for a rules
// folder.
type ociFlags struct {
	registryFlags
	verifyKeys []string
	interval   time.Duration // dev and run: how often a tag is asked for
	cache      string        // dev and run: the cache folder
	following  bool          // dev and run
}

// DefaultPullInterval is how often dev and run ask the registry where a
// tag points (--pull-interval).
const DefaultPullInterval = 30 * time.Second

// pullTimeout bounds one pull of a follower.
const pullTimeout = 2 * time.Minute

func (f *ociFlags) register(cmd *cobra.Command, following bool) {
	f.registryFlags.register(cmd)
	f.following = following
	cmd.Flags().StringArrayVar(&f.verifyKeys, "verify-key", nil, "with oci://REF: load only an artifact signed with this ed25519 public key (PEM; repeat for several keys, one signature suffices)")
	if following {
		cmd.Flags().DurationVar(&f.interval, "pull-interval", DefaultPullInterval, "with oci://REGISTRY/REPO:TAG: how often the registry is asked where the tag points; a new digest is pulled and hot-reloaded")
		cmd.Flags().StringVar(&f.cache, "oci-cache", "", "with oci://REF: the folder of pulled rules, which a restart without the registry runs (default $XDG_CACHE_HOME/ssrun/oci, else ~/.cache/ssrun/oci)")
	}
}

// client returns the registry client of f.
func (f *ociFlags) client(a *app) (*ocirules.Client, error) {
	o := f.options(a)
	for _, p := range f.verifyKeys {
		k, err := ocirules.ReadPublicKey(p)
		if err != nil {
			return nil, usageError("--verify-key: %v", err)
		}
		o.VerifyKeys = append(o.VerifyKeys, k)
	}
	c, err := ocirules.New(o)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return c, nil
}

// openRules returns the folder of arg, a rules folder or an oci://
// reference: for a reference, its pulled version (see ocirules.Open) in
// --oci-cache when following (dev, run: the tag is then followed every
// --pull-interval until the returned close is called), else in a
// temporary folder removed by close (check, test).
func (a *app) openRules(ctx context.Context, f *ociFlags, arg string) (dir string, close func() error, err error) {
	if !ocirules.IsRef(arg) {
		return arg, func() error { return nil }, nil
	}
	ref, err := ocirules.ParseRef(arg)
	if err != nil {
		return "", nil, usageError("%v", err)
	}
	if f.following && f.interval <= 0 {
		return "", nil, usageError("--pull-interval %v: want a positive duration", f.interval)
	}
	c, err := f.client(a)
	if err != nil {
		return "", nil, err
	}
	cache, removeCache := f.cache, func() error { return nil }
	switch {
	case !f.following:
		if cache, err = os.MkdirTemp("", "ssrun-oci-"); err != nil {
			return "", nil, err
		}
		removeCache = func() error { return os.RemoveAll(cache) }
	case cache == "":
		base, err := os.UserCacheDir()
		if err != nil {
			return "", nil, usageError("no cache folder for oci:// rules (%v): give --oci-cache", err)
		}
		cache = filepath.Join(base, "ssrun", "oci")
	}
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	src, err := c.Open(pctx, ref, cache)
	cancel()
	if err != nil {
		_ = removeCache()
		return "", nil, &exitError{code: 1, msg: "ssrun: " + err.Error()}
	}
	a.log.Info("rules from the registry", "ref", src.Running().String(), "files", len(src.Files()), "dir", src.Dir())
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if f.following {
		wg.Go(func() { src.Follow(fctx, f.interval, pullTimeout) })
	}
	return src.Dir(), func() error {
		stop()
		wg.Wait()
		return errors.Join(src.Close(), removeCache())
	}, nil
}

// pushCmd is `ssrun push DIR REF`.
func (a *app) pushCmd() *cobra.Command {
	var rf registryFlags
	var signKey string
	cmd := &cobra.Command{
		Use:   "push DIR REGISTRY/REPOSITORY:TAG",
		Short: "Push a rules folder to an OCI registry as an artifact; print its pinned reference",
		Long: `Push a rules folder to an OCI registry as an artifact, and print its
reference pinned by digest (oci://REGISTRY/REPOSITORY:TAG@sha256:...), which
dev, run, check and test take in place of a folder.

DIR's rule files (*.lua, *.wasm), ssrun.yaml and test files (NAME.test.yaml,
NAME_test.yaml) are packed, one layer each; other files are skipped. A
project folder without rule files of its own packs its rules/ folder (where
a Go or AssemblyScript rule is built). A native plugin is refused: build it
into the container image. The same files always give the same digest.
Credentials are Docker's (docker login) unless --registry-config names
others. --sign-key signs the artifact (an ed25519 private key in PEM, as
openssl genpkey -algorithm ed25519 writes it); --verify-key on the pulling
side then loads only what such a key signed.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := args[1]
			if !ocirules.IsRef(arg) {
				arg = ocirules.Scheme + arg
			}
			ref, err := ocirules.ParseRef(arg)
			if err != nil {
				return usageError("%v", err)
			}
			var key ed25519.PrivateKey
			if signKey != "" {
				if key, err = ocirules.ReadPrivateKey(signKey); err != nil {
					return usageError("--sign-key: %v", err)
				}
			}
			c, err := ocirules.New(rf.options(a))
			if err != nil {
				return usageError("%v", err)
			}
			p, err := ocirules.Pack(args[0], ocirules.Limits{})
			if err != nil {
				return &exitError{code: 1, msg: "ssrun push: " + err.Error()}
			}
			pushed, err := c.Push(cmd.Context(), p, ref, key)
			if err != nil {
				return &exitError{code: 1, msg: "ssrun push: " + err.Error()}
			}
			fmt.Fprintln(a.stdout, pushed.Ref.String())
			var names []string
			for _, f := range p.Files {
				names = append(names, f.Name)
			}
			fmt.Fprintf(a.stderr, "pushed %d file(s), %d bytes, from %s: %s\n", len(p.Files), p.Bytes(), p.Dir, strings.Join(names, ", "))
			if len(p.Skipped) > 0 {
				fmt.Fprintf(a.stderr, "not pushed (not rules, ssrun.yaml or tests): %s\n", strings.Join(p.Skipped, ", "))
			}
			if key != nil {
				fmt.Fprintf(a.stderr, "signed with key %s\n", ocirules.KeyID(key.Public().(ed25519.PublicKey)))
			}
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&signKey, "sign-key", "", "sign the artifact with this ed25519 private key (PEM, PKCS #8)")
	return cmd
}
