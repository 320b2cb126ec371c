package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/gossip"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/mesh"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/dashboard"
	"github.com/gpumesh/gpumesh/node/datadir"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/fence"
	ma "github.com/multiformats/go-multiaddr"
)

// nodeFlags are the flags of `gpumesh node`.
type nodeFlags struct {
	data        string
	listen      []string
	join        []string
	network     string
	secretFile  string
	sim         string
	simSeed     string
	api         string
	ingress     string
	apiToken    string
	region      string
	prices      []string
	mdns        bool
	noNAT       bool
	reach       string
	coordinator string
	verify      string
	isolation   string
	keepDirs    bool
	drain       time.Duration
	ckptEvery   time.Duration
	ckptMaxMiB  int
	ckptKeep    int
	storeMax    string
	keepOutputs time.Duration
	keepLogs    time.Duration
	keepJobs    time.Duration
	ociRuntime  string
	mirrors     []string
	imageCache  string
	jobKinds    []string
	maxPayload  string
	ownerQuota  string
	policy      policyFlags
	log         *logFlags
	configFile  string
	printConfig bool
}

func newNodeCommand(e env) *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a supplier node: join the mesh, offer this machine's cards, run the jobs it wins",
		Long: `Run a gpumesh node until SIGINT or SIGTERM.

The node joins the mesh (the peers given with --join, and peers found by mDNS on
the LAN), advertises its cards and their prices, takes part in the auctions
that place jobs, runs the shares it wins, and serves the local API that the
other gpumesh commands talk to. At start it logs its peer ID and the full
addresses another node can --join.

On SIGINT or SIGTERM it leaves the mesh gracefully (peers see it as "left",
not "dead") and stops the jobs it runs.

Every flag can also be set in a TOML configuration file, one top-level key
per flag without its dashes (data = "/var/lib/gpumesh", join = ["..."],
mdns = false); flags given on the command line override it. The file is
--config FILE, else /etc/gpumesh/node.toml when it exists, else
$XDG_CONFIG_HOME/gpumesh/node.toml (~/.config/gpumesh/node.toml) when it
exists. ` + "`gpumesh node init`" + ` writes one; --print-config shows the
configuration in effect and exits.

Examples:
  gpumesh node --sim h100-sxm-80g:8                  # a node with 8 simulated H100s
  gpumesh node --join /ip4/10.0.0.5/tcp/4747/p2p/12D3KooW...
  gpumesh node --secret-file mesh.key --network lab  # a private mesh
  gpumesh node --allow-owner o1abc... --max-job-duration 8h --job-network none

Which jobs it runs is the supplier's choice: --allow-owner and --deny-owner
name owners by their IDs (` + "`gpumesh key show`" + ` prints yours), --max-job-duration
refuses jobs that expect to run longer and stops any job at that age, and
--job-network is the most network a job gets: none, egress (the public
internet only; the default) or host (this machine's own network). A gang
across nodes on none or egress gets a private network between its shares,
which the sandbox gives (root, ip and nft); a node that cannot give it does
not bid for such a gang. The node does not bid for a job its policy refuses;
the job's --explain says why.

What a job may use besides its cards is capped too (enforced by the sandbox):
--max-job-memory (default auto: this machine's memory less a tenth, at least
1 GiB and at most 16 GiB, kept for the system and the node), --max-job-pids
(default 8192) and --max-job-cpu-weight (default no cap; the weight counts
only against this node's other jobs). A job declaring more (gpumesh submit
--memory, --pids, --cpu-weight) gets no bid, and --explain names the cap; a
job declaring none gets the cap (the pids and CPU weight defaults, 8192 and
100, where those are lower), so an out-of-memory job is killed, never the
node.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			file, lines, err := f.readConfigFile(cmd.Flags(), e)
			if err != nil {
				return err
			}
			if f.printConfig {
				fmt.Fprint(e.stdout, printConfig(cmd.Flags()))
				return nil
			}
			cfg, err := f.config(e)
			if err != nil {
				return configOrigin(err, file, lines)
			}
			n, err := node.Start(cmd.Context(), cfg)
			if err != nil {
				return nodeStartError(err)
			}
			for _, a := range n.Mesh().Addrs() {
				cfg.Logger.Info("join this node with", "addr", a.String())
			}
			<-cmd.Context().Done()
			if f.drain > 0 {
				cfg.Logger.Info("signal received; draining before leaving", "timeout", f.drain)
				ctx, cancel := context.WithTimeout(context.Background(), f.drain)
				_ = n.Drain(ctx)
				cancel()
			}
			cfg.Logger.Info("leaving the mesh")
			return n.Close()
		},
	}
	f.register(cmd.Flags(), e)
	cmd.Flags().StringVar(&f.configFile, flagConfig, "", "the configuration `FILE` (TOML, a key per flag; default "+systemConfigFile+" when it exists, else $XDG_CONFIG_HOME/gpumesh/node.toml)")
	cmd.Flags().BoolVar(&f.printConfig, flagPrintConfig, false, "print the configuration in effect (defaults, the file, the flags) as TOML, and exit")
	cmd.AddCommand(newDrainCommand(e), newNodeInitCommand(e))
	return cmd
}

// readConfigFile applies the configuration file to the flags of fl that
// the command line left unset. It returns the file read ("" for none) and
// the line of each key it set.
func (f *nodeFlags) readConfigFile(fl *pflag.FlagSet, e env) (string, map[string]int, error) {
	path, explicit := configSource(f.configFile, e)
	if path == "" {
		return "", nil, nil
	}
	if !explicit {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return "", nil, nil
		}
	}
	entries, err := loadConfig(path)
	if err != nil {
		return "", nil, usageError{err}
	}
	lines, err := applyConfig(fl, path, entries)
	if err != nil {
		return "", nil, usageError{err}
	}
	return path, lines, nil
}

// register adds the flags of `gpumesh node` to fl.
func (f *nodeFlags) register(fl *pflag.FlagSet, e env) {
	fl.StringVar(&f.data, "data", defaultDataDir(e), "data directory: identity key, state, payloads, job directories")
	fl.StringArrayVar(&f.listen, "listen", nil, "multiaddr to listen on (repeatable; default TCP and QUIC on port 4747, all interfaces)")
	fl.StringArrayVar(&f.join, "join", nil, "full multiaddr of a peer to join, ending in /p2p/ID (repeatable)")
	fl.StringVar(&f.network, "network", mesh.DefaultNetwork, "mesh name: nodes of different networks never talk")
	fl.StringVar(&f.secretFile, "secret-file", "", "file holding the mesh secret: only holders may join (a private mesh)")
	fl.StringVar(&f.sim, "sim", "", "offer simulated cards instead of real ones, e.g. h100-sxm-80g:8,rtx4090-48g:2")
	fl.StringVar(&f.simSeed, "sim-seed", "", "seed of the simulated cards' IDs (default: the data dir)")
	fl.StringVar(&f.api, "api", api.DefaultAddr, "address of the local HTTP API (\"\" to serve none)")
	fl.StringVar(&f.apiToken, "api-token-file", "", "file holding the API token; required when --api is not loopback")
	fl.StringVar(&f.ingress, "ingress", "", "serve the mesh's public services (submit --public) to anyone at http://`ADDR`/JOB_ID/ (host:port; default none)")
	fl.StringVar(&f.region, "region", "", "region label advertised with the cards, e.g. cn-east")
	fl.StringArrayVar(&f.prices, "price", nil, "price of a model in CNY per card-hour, MODEL=PRICE (repeatable; default the catalog's list price)")
	fl.BoolVar(&f.mdns, "mdns", true, "find peers on the LAN by mDNS")
	fl.BoolVar(&f.noNAT, "no-nat", false, "turn off NAT traversal (AutoNAT, relays, hole punching)")
	fl.StringVar(&f.reach, "reachability", string(mesh.ReachabilityAuto), "whether peers can dial this node: auto (AutoNAT asks public peers), public (relay for peers behind NAT: for a node at a public address whose peers are all behind NAT) or private")
	fl.StringVar(&f.coordinator, "coordinator", string(node.CoordinatorAuto), "coordinate jobs: auto (after 30 s as a member) or never")
	fl.StringVar(&f.verify, "verify", "", "as coordinator, make suppliers pass a timed probe of their cards: new (before their first award here; default without --secret-file), always (before each award) or never (default with --secret-file)")
	fl.StringVar(&f.isolation, "isolation", string(executor.IsolationAuto), "job isolation: auto (sandbox when root on Linux), sandbox or process")
	fl.BoolVar(&f.keepDirs, "keep-attempt-dirs", false, "for debugging: keep each job attempt's work and tmp directories after it ends, as long as its logs (default: removed once its outputs are kept)")
	fl.DurationVar(&f.keepJobs, "keep-jobs", node.DefaultKeepJobs, "how long this node keeps the record of a job that ended (as its coordinator or a replica); then only its end is kept, and its ID cannot be submitted again (at least 1h)")
	fl.DurationVar(&f.keepLogs, "keep-logs", executor.DefaultKeepLogs, "how long the logs and checkpoint directory of a job attempt that ended stay on this node's disk, for gpumesh logs")
	fl.DurationVar(&f.ckptEvery, "checkpoint-interval", node.DefaultCheckpointInterval, "how often a running job's changed $GPUMESH_CHECKPOINT_DIR is shipped to its coordinator (also when it ends)")
	fl.IntVar(&f.ckptKeep, "checkpoint-keep", node.DefaultCheckpointKeep, "how many checkpoints of each share to keep (as their runner, holder and coordinator), newest first: a rerouted attempt restores the newest whole one (1 to 100)")
	fl.IntVar(&f.ckptMaxMiB, "checkpoint-max-mib", 0, "the most MiB one checkpoint may take; a bigger one is not shipped (0: no limit but --store-max)")
	fl.StringVar(&f.storeMax, "store-max", "", "the most the content store (checkpoints, and what this node holds for others' jobs) may take: a `SIZE` such as 200GiB (default: half of what the data dir's file system could give it, at most a quarter of the disk)")
	fl.DurationVar(&f.keepOutputs, "keep-outputs", node.DefaultKeepOutputs, "how long the checkpoints, payload and outputs of a job that ended are kept")
	fl.StringVar(&f.maxPayload, "max-payload", "", "the largest payload this node takes from an owner, or holds for a job it coordinates: a `SIZE` such as 50GiB (default: no limit but --store-max and --owner-quota)")
	fl.StringVar(&f.ownerQuota, "owner-quota", "", "the most this node keeps of payloads for one owner: a `SIZE` such as 100GiB (default: half of --store-max)")
	fl.StringArrayVar(&f.jobKinds, "job-kinds", nil, "the kinds of job this node runs: image (in an OCI image, under crun or runc), host (a command on this machine, in the sandbox) or image,host (default both)")
	fl.StringVar(&f.ociRuntime, "oci-runtime", executor.RuntimeAuto, "the OCI runtime that runs jobs in images: auto (crun, else runc: the first that works here), a command or path, or none")
	fl.StringArrayVar(&f.mirrors, "registry-mirror", nil, "pull a registry's images through a mirror first, `REGISTRY=URL` such as docker.io=https://mirror.example.com (repeatable; tried in order, then the registry)")
	fl.StringVar(&f.imageCache, "image-cache-max", "", "the most the unpacked images kept for jobs may take: a `SIZE` such as 100GiB (default 64GiB); images no job uses go first, least recently used")
	fl.DurationVar(&f.drain, "drain-timeout", 0, "on SIGTERM, first move the shares this node runs elsewhere, waiting at most this long (0: stop them at once)")
	fl.StringArrayVar(&f.policy.allow, "allow-owner", nil, "run only jobs of this owner `ID` (repeatable, or comma-separated; default every owner)")
	fl.StringArrayVar(&f.policy.deny, "deny-owner", nil, "never run jobs of this owner `ID` (repeatable, or comma-separated)")
	fl.DurationVar(&f.policy.maxDuration, "max-job-duration", 0, "refuse jobs that expect to run longer, and stop jobs at this age, such as 8h (default no limit)")
	fl.StringVar(&f.policy.network, "job-network", string(defaultJobNetwork), "the most network a job gets: none, egress (the public internet only) or host")
	fl.StringVar(&f.policy.maxMemory, "max-job-memory", autoJobMemory, "the most memory a job's share may have, and what one declaring none gets: a `SIZE` such as 16GiB, auto (this machine's memory less a tenth kept back, 1 GiB to 16 GiB) or 0 (no cap)")
	fl.IntVar(&f.policy.maxPids, "max-job-pids", node.DefaultMaxJobPids, "the most processes and threads a job's share may have, and what one declaring none gets (0: no cap)")
	fl.IntVar(&f.policy.maxCPUWeight, "max-job-cpu-weight", 0, "the highest CPU weight (1-10000) a job may declare against this node's other jobs (default no cap)")
	fl.StringVar(&f.policy.ownerTokens, "owner-tokens", "", "`FILE` of owner API tokens, one \"TOKEN KEY_FILE\" a line: a request with the token acts as that key's owner")
	f.log = addLogFlags(fl)
}

// defaultDataDir is $XDG_DATA_HOME/gpumesh, else ~/.local/share/gpumesh.
func defaultDataDir(e env) string {
	if d := e.getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "gpumesh")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "gpumesh")
	}
	return "gpumesh-data"
}

// config turns the flags into a node configuration; every bad value is a
// usage error naming the flag.
func (f nodeFlags) config(e env) (node.Config, error) {
	logger := f.log.logger(e.stderr)
	cfg := node.Config{Region: f.region, Logger: logger, Version: buildVersion(), Dashboard: dashboard.Handler()}
	if argv, err := fence.Command(); err == nil {
		cfg.FenceCommand = argv
	} else {
		logger.Warn("no fence keeper: cannot find this binary", "err", err)
	}
	var err error
	if cfg.DataDir, err = dataDir(f.data, e); err != nil {
		return cfg, err
	}
	if cfg.Coordinator, err = node.ParseCoordinatorMode(f.coordinator); err != nil {
		return cfg, usagef("--coordinator: %v", err)
	}
	if f.verify != "" {
		if cfg.Verify, err = market.ParseVerifyMode(f.verify); err != nil {
			return cfg, usagef("--verify: %v", err)
		}
	}
	if f.ckptEvery <= 0 {
		return cfg, usagef("--checkpoint-interval %v: want a positive duration, such as 30s", f.ckptEvery)
	}
	if f.ckptMaxMiB < 0 {
		return cfg, usagef("--checkpoint-max-mib %d: want a number of MiB, 0 for no limit", f.ckptMaxMiB)
	}
	if f.ckptKeep < 1 || f.ckptKeep > 100 {
		return cfg, usagef("--checkpoint-keep %d: want 1 to 100 checkpoints", f.ckptKeep)
	}
	cfg.CheckpointInterval, cfg.CheckpointLimit, cfg.CheckpointKeep = f.ckptEvery, int64(f.ckptMaxMiB)<<20, f.ckptKeep
	if f.storeMax != "" {
		n, err := parseBytes(f.storeMax)
		if err != nil || n <= 0 {
			return cfg, usagef("--store-max %q: want a size such as 200GiB", f.storeMax)
		}
		cfg.StoreMax = n
	}
	for _, s := range []struct {
		flag, v string
		to      *int64
	}{{"--max-payload", f.maxPayload, &cfg.MaxPayload}, {"--owner-quota", f.ownerQuota, &cfg.OwnerQuota}} {
		if s.v == "" {
			continue
		}
		n, err := parseBytes(s.v)
		if err != nil || n <= 0 {
			return cfg, usagef("%s %q: want a size such as 50GiB", s.flag, s.v)
		}
		*s.to = n
	}
	if f.keepOutputs <= 0 {
		return cfg, usagef("--keep-outputs %v: want a positive duration, such as 24h", f.keepOutputs)
	}
	cfg.KeepOutputs = f.keepOutputs
	if f.keepJobs < time.Hour {
		return cfg, usagef("--keep-jobs %v: want at least 1h (a submission retried later than that would find no record)", f.keepJobs)
	}
	cfg.KeepJobs = f.keepJobs
	if f.keepLogs <= 0 {
		return cfg, usagef("--keep-logs %v: want a positive duration, such as 168h", f.keepLogs)
	}
	cfg.Executor.KeepLogs = f.keepLogs
	iso, err := executor.ParseIsolation(f.isolation)
	if err != nil {
		return cfg, usagef("--isolation: %v", err)
	}
	cfg.Executor.Isolation = iso
	cfg.Executor.KeepAttemptDirs = f.keepDirs
	if cfg.Policy, err = f.policy.policy(logger); err != nil {
		return cfg, err
	}
	if err := f.images(&cfg, e); err != nil {
		return cfg, err
	}
	cfg.Mesh.Network = f.network
	cfg.Mesh.MDNS = f.mdns
	cfg.Mesh.DisableNAT = f.noNAT
	if cfg.Mesh.Reachability, err = mesh.ParseReachability(f.reach); err != nil {
		return cfg, usagef("--reachability: %v", err)
	}
	for _, s := range f.listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return cfg, usagef("--listen %q: %v", s, err)
		}
		cfg.Mesh.ListenAddrs = append(cfg.Mesh.ListenAddrs, a)
	}
	for _, s := range f.join {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return cfg, usagef("--join %q: %v", s, err)
		}
		if _, err := a.ValueForProtocol(ma.P_P2P); err != nil {
			return cfg, usagef("--join %q: want a full multiaddr ending in /p2p/<peer ID>", s)
		}
		cfg.Mesh.Join = append(cfg.Mesh.Join, a)
	}
	if f.secretFile != "" {
		secret, err := os.ReadFile(f.secretFile)
		if err != nil {
			return cfg, usagef("--secret-file: %v", err)
		}
		secret = []byte(strings.TrimSpace(string(secret)))
		if len(secret) < 16 {
			return cfg, usagef("--secret-file %s: the secret is %d bytes; want at least 16", f.secretFile, len(secret))
		}
		cfg.Mesh.Secret = secret
	}
	if err := gossip.ValidateNetwork(f.network); err != nil {
		return cfg, usagef("--network: %v", err)
	}
	if len(f.prices) > 0 {
		cfg.Prices = map[string]float64{}
		cat := device.DefaultCatalog()
		for _, p := range f.prices {
			model, price, ok := strings.Cut(p, "=")
			v, err := strconv.ParseFloat(price, 64)
			if !ok || err != nil || v <= 0 {
				return cfg, usagef("--price %q: want MODEL=CNY_PER_HOUR with a positive price", p)
			}
			if _, known := cat.Lookup(model); !known && !device.IsDerivedKey(model) {
				return cfg, usagef("--price %q: unknown model %q; closest known: %s", p, model, strings.Join(cat.Closest(model, 3), ", "))
			}
			cfg.Prices[model] = v
		}
	}
	if f.sim != "" {
		cat := device.DefaultCatalog()
		spec, err := device.ParseSimSpec(f.sim, cat)
		if err != nil {
			return cfg, usagef("--sim: %v", err)
		}
		seed := f.simSeed
		if seed == "" {
			seed = cfg.DataDir
		}
		s, err := device.NewSim(spec, seed, cat)
		if err != nil {
			return cfg, usagef("--sim: %v", err)
		}
		cfg.Devices = []device.Backend{s}
	}
	if f.ingress != "" {
		if _, port, err := net.SplitHostPort(f.ingress); err != nil || port == "" {
			return cfg, usagef("--ingress %q: want host:port, such as 0.0.0.0:8080", f.ingress)
		}
		cfg.Ingress = f.ingress
	}
	if f.api != "" {
		ac := &api.Config{Addr: f.api}
		if f.apiToken != "" {
			tok, err := os.ReadFile(f.apiToken)
			if err != nil {
				return cfg, usagef("--api-token-file: %v", err)
			}
			ac.Token = strings.TrimSpace(string(tok))
			if ac.Token == "" {
				return cfg, usagef("--api-token-file %s is empty", f.apiToken)
			}
		}
		if f.policy.ownerTokens != "" {
			if ac.OwnerTokens, err = loadOwnerTokens(f.policy.ownerTokens); err != nil {
				return cfg, usagef("--owner-tokens: %v", err)
			}
		}
		cfg.API = ac
	} else if f.policy.ownerTokens != "" {
		return cfg, usagef("--owner-tokens: the node serves no API (--api \"\")")
	}
	return cfg, nil
}

// dataDir resolves --data to an absolute path ("~" and "~/…" in the home
// directory, as a shell would have for --data ~/x but not --data=~/x) and
// checks it can be the data dir, writing nothing.
func dataDir(flag string, e env) (string, error) {
	dir, err := resolvePath(flag, e)
	if err != nil {
		return "", usagef("--data %s: %v", flag, err)
	}
	var dde *datadir.Error
	if err := datadir.Check(dir); errors.As(err, &dde) {
		return "", usagef("--data %s: %s", dir, dde.Why)
	} else if err != nil {
		return "", usagef("--data %s: %v", dir, err)
	}
	return dir, nil
}

// resolvePath makes a path from the command line absolute: "~" and "~/…"
// (or "~\…" on Windows) start at the home directory ($HOME, %USERPROFILE%
// on Windows), anything else relative starts at the working directory.
func resolvePath(p string, e env) (string, error) {
	if p == "" {
		return "", errors.New("a directory is required")
	}
	if rest, ok := strings.CutPrefix(p, "~"); ok {
		if rest != "" && rest[0] != '/' && rest[0] != filepath.Separator {
			return "", errors.New("only ~ and ~/… are expanded (to your home directory); give the path of another user's directory in full")
		}
		homeVar := "HOME"
		if runtime.GOOS == "windows" {
			homeVar = "USERPROFILE"
		}
		home := e.getenv(homeVar)
		if home == "" {
			return "", fmt.Errorf("no home directory for ~ ($%s is not set)", homeVar)
		}
		p = filepath.Join(home, rest)
	}
	return filepath.Abs(p)
}

// nodeStartError makes start-up failures that the user can fix usage
// errors with the reason in front.
func nodeStartError(err error) error {
	var dde *datadir.Error
	if errors.Is(err, api.ErrTokenRequired) || errors.As(err, &dde) {
		return usageError{err}
	}
	return fmt.Errorf("node did not start: %w", err)
}
