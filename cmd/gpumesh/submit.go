package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api/client"
	"github.com/gpumesh/gpumesh/node/image"
)

func newSubmitCommand(e env) *cobra.Command {
	var (
		o        submitOptions
		af       apiFlags
		payload  string
		df       dataFlags
		wait     bool
		asJSON   bool
		retryFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit --gpus N [flags] -- COMMAND [ARGS...]",
		Short: "Submit a job to the mesh through a node",
		Long: `Submit a job: COMMAND runs on N cards somewhere in the mesh, placed by
auction, billed per second. Prints the job ID (--json: the job's record).

Everything after the first argument that is not a flag is the job's command;
put -- before it when it starts with a dash. The command runs without a
shell: to use the job's variables ($NODE_RANK...), run it under sh -c with
the script in single quotes, so that your own shell leaves them alone.

Cards: --model takes catalog keys (h100-sxm-80g), patterns (h100-*,
rtx4090-*) or keys of uncatalogued cards (x-...); repeat it or separate with
commas. --min-mem takes 24GiB, 24G or 24576MiB (binary units whatever the
spelling). --min-cu is compute per card in A100 units (dense BF16 TFLOPS/312).

Layout: by default cards may spread over any nodes. --per-node N puts exactly
N on each node used (a gang job: torchrun's nproc_per_node; the job sees
NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, WORLD_SIZE). --one-node keeps
all cards on one node. The cards a job gets on one node (a share) are of
one model, whatever --model allows; --mixed-models lets a share mix models
(its placement's model then lists them, such as a100-80g+rtx4090-24g).
Shares on different nodes may be of different models: --model pins them.
Simulated cards (a supplier's gpumesh node --sim: catalog figures, no
hardware) are never offered to a job unless it says --allow-simulated; a job
only simulated cards could take waits in pending, saying so.

Price: --max-price is the most paid per card-hour, in CNY. When it is not
given, the default is the highest price suppliers ask by default (the
catalog list price, or an estimate from compute) among the models the job
allows, so that any allowed card at its default price can win; the figure
is printed on stderr. It is required when --model names uncatalogued cards.

Kinds: a batch job (default) runs to completion; --preemptible runs cheaper
and may be stopped and placed again when on-demand jobs need its cards;
--service (or --replicas N) keeps N copies of --gpus cards each running until
cancelled, each on its own node, and in distinct regions (node --region)
where the supply allows.

A service with --port PORT is reached through any node: gpumesh exec and
port-forward reach into its replicas, and every node's API serves it at
/v1/jobs/ID/http/… (owner only), sending each request to a ready replica.
A replica is ready, and counts as running, only while its readiness probe
answers: an HTTP GET of --ready-path (2xx or 3xx), or without it a TCP
connect to PORT. --public lets nodes started with --ingress ADDR serve it
to anyone at http://ADDR/JOB_ID/….

Images: --image REF runs each share in an OCI image (docker run's way:
the image's entrypoint, with the command after -- replacing its Cmd, or
its own Cmd without one; its Env, WorkingDir and User) under the
supplier's container runtime, on suppliers that run images (gpumesh node
--job-kinds). --image VENDOR=REF names the image for the shares on one
vendor's cards (nvidia, amd, hygon, mthreads, huawei, kunlunxin): with
--image nvidia=REF1 --image mthreads=REF2 a job may span both vendors, and
is never placed on cards of a vendor it names no image for (a REF without
VENDOR= serves every vendor). Tags are resolved to digests here, before
signing, with the credentials of the docker config file ($DOCKER_CONFIG,
else ~/.docker: docker login writes it), so every share of every attempt
runs the same bits; the spec names each image as repo@sha256:….

--payload DIR sends the directory to the node and has it restored into the
job's working directory before the command starts: files, directories and
links inside it (a link leaving it is refused), of any size. It travels as
content-addressed chunks: this machine computes the tree's manifest, the
node says which chunks it lacks, and only those are sent; a dataset sent
before (a second job with the same data) sends nothing new. The spec names
the manifest's digest, which your signature covers: a supplier runs those
bytes or none. The node keeps the payload while the job lives, and for
its --keep-outputs after (24h by default); a node may limit payloads
(--max-payload) and what it keeps for one owner (--owner-quota), each
refused with 413 naming the limit. The upload needs your owner key.

--input SRC[:PATH] stages SRC into the working directory (at PATH, default
the directory itself) before the command starts: s3://BUCKET/PREFIX (every
object under it), or a local directory, sent as --payload sends one.
--output PATH:s3://BUCKET/PREFIX sends a file or directory of the working
directory to object storage after the command ends. Their credentials are
secrets: --secret NAME[=VALUE] (the value from your environment when not
given) sends a value to the node, which keeps it out of the job's record
and hands it only to the job's runners, as an environment variable; the
storage is reached with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL for another S3 server). The
supplier running the job can read its secrets: give scoped keys.

The job ID is made here unless --id gives one, so submitting again with the
same --id after an error whose outcome is unknown never starts the job twice.
A node that answers 429 (saturated: it says when to come back) or 503 (the
job's coordinator or replicas did not answer in time) gets the same
submission again, with the same ID, for --retry-for (default 30s; 0: never),
each time said on stderr.

--wait waits for the job to end and exits with its status: 0 when it
succeeded, the job's exit code when it failed with one, 1 when it failed
without one or was cancelled (with the reason on stderr). While it waits,
it says on stderr what the job waits for each time that changes ("job ID
is pending: waiting for capacity: 3 of 3 suppliers asked declined: ...").

A gang across nodes (--per-node N with more than N cards) gets a private
network of its own: each share has an address on a subnet only the job's
shares share (MASTER_ADDR is share 0's), and TCP between them travels over
the mesh between their nodes, through NATs (hole-punched, or relayed for
little data).
Suppliers whose nodes cannot give one (no sandbox, no nftables) decline the
gang, and its reason says why; with --net host the gang meets on the
suppliers' own networks instead, where they allow host.

Network: a job sees no network by default (a gang across nodes: its private
network alone); --net egress asks for the public internet, --net host for
the supplier's own network. Suppliers choose what they allow (gpumesh node
--job-network); those that do not allow it do not bid.

Resources: --memory (a size such as 16GiB), --pids and --cpu-weight (1-10000,
against other jobs on the same node; 100 by default) cap what each share may
use on its node besides its cards; past --memory the job is killed. Without
them a share gets the supplier's caps (gpumesh node --max-job-memory,
--max-job-pids). Suppliers whose caps are lower than you ask do not bid
(gpumesh job ID --explain names the cap).

Owner: the job is signed with your owner key (gpumesh key; --key or
$GPUMESH_KEY) and belongs to it: only requests signed with that key may read
its logs, record, bill and checkpoint, or cancel or scale it.

Exit status 2 means bad flags or a spec the node refused: nothing was
submitted.`,
		Example: `  gpumesh submit --gpus 1 -- nvidia-smi
  gpumesh submit --gpus 8 --model h100-sxm-80g --one-node --max-price 25 --payload ./train --wait -- \
      sh -c 'torchrun --nproc_per_node=$GPUMESH_LOCAL_CARDS train.py'
  # a gang of 2 nodes × 4: runs on suppliers started with --job-network host
  gpumesh submit --gpus 8 --model h100-sxm-80g --per-node 4 --max-price 25 --payload ./train --wait -- \
      sh -c 'torchrun --nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=$GPUMESH_LOCAL_CARDS \
        --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT train.py'
  gpumesh submit --gpus 1 --image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime -- python -c 'import torch; print(torch.cuda.device_count())'
  gpumesh submit --gpus 8 --image nvidia=nvcr.io/nvidia/pytorch:24.05-py3 --image mthreads=registry.mthreads.com/musa/torch:latest -- python train.py
  gpumesh submit --gpus 2 --min-mem 48GiB --vendor nvidia --preemptible --env HF_HOME=/tmp/hf -- python infer.py
  gpumesh submit --gpus 1 --replicas 3 --model 'rtx4090-*' -- python serve.py
  gpumesh submit --gpus 1 --replicas 3 --port 8000 --ready-path /health --public -- \
      vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000`,
		Args: cobra.ArbitraryArgs, // the job's command
		RunE: func(cmd *cobra.Command, args []string) error {
			o.command = args
			o.maxPriceSet = cmd.Flags().Changed("max-price")
			o.replicasSet = cmd.Flags().Changed("replicas")
			if o.id == "" {
				id, err := newJobID()
				if err != nil {
					return err
				}
				o.id = id
			}
			cat := device.DefaultCatalog()
			resolver := image.Resolver{Keychain: image.DockerConfig(dockerConfigDir(e))}
			spec, defaulted, err := buildSpec(o, cat, func(ref string) (string, error) {
				return resolver.Resolve(cmd.Context(), ref)
			})
			if err != nil {
				return err
			}
			data, secrets, local, err := df.data(e.getenv)
			if err != nil {
				return err
			}
			payloadPath := "."
			if local != nil {
				if payload != "" {
					return usagef("--input %s and --payload %s: a job takes one local directory", local.dir, payload)
				}
				payload, payloadPath = local.dir, local.path
			}
			if retryFor < 0 {
				return usagef("--retry-for %v: want 0 (never) or more", retryFor)
			}
			c, err := af.client(e, client.WithSubmitRetry(retryFor, func(n client.RetryNote) {
				fmt.Fprintf(e.stderr, "gpumesh: %s\n", n)
			}))
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			if payload != "" {
				p, err := client.ScanPayload(cmd.Context(), payload)
				if err != nil {
					return usagef("%s: %v", payloadFlag(local), err)
				}
				st, err := c.UploadPayload(cmd.Context(), p)
				var ae *client.APIError
				switch {
				case errors.As(err, &ae):
					return apiError(err, map[string]string{"": payloadFlag(local), "payload": payloadFlag(local)})
				case err != nil:
					return fmt.Errorf("%s: %w", payloadFlag(local), apiError(err, nil))
				}
				fmt.Fprintf(e.stderr, "gpumesh: payload %s: %s, %s; sent %s (%s)\n", payload,
					text.Count(st.Files, "file"), text.Bytes(st.Bytes), text.Bytes(st.UploadedBytes), sentWhy(st))
				spec.Payload = &st.Ref
				if payloadPath != "." {
					spec.Payload.Path = payloadPath
				}
			}
			if len(secrets) > 0 {
				ref, err := c.PutSecrets(cmd.Context(), secrets)
				if err != nil {
					return apiError(err, map[string]string{"": "--secret", "values": "--secret"})
				}
				data.Secrets = &ref
				fmt.Fprintf(e.stderr, "gpumesh: %s (%s) given to the node; only the job's runners receive them\n",
					text.Plural(len(ref.Names), "secret", "secrets"), strings.Join(ref.Names, ", "))
			}
			spec.Data = data
			if defaulted {
				fmt.Fprintf(e.stderr, "gpumesh: no --max-price: paying at most %.2f CNY per card-hour (the highest default price among the allowed models)\n", spec.MaxPriceCNY)
			}
			rec, err := c.Submit(cmd.Context(), spec)
			if err != nil {
				return submitError(err, spec.ID)
			}
			if !wait {
				if asJSON {
					return writeJSON(e.stdout, rec)
				}
				_, err := fmt.Fprintln(e.stdout, rec.ID)
				return err
			}
			if !asJSON {
				fmt.Fprintln(e.stdout, rec.ID)
			}
			return waitForJob(cmd.Context(), e, c, rec.ID, asJSON)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // the job's command and its flags are not ours
	f.IntVar(&o.gpus, "gpus", 0, "number of cards (required); for a service, cards per replica")
	f.StringSliceVar(&o.models, "model", nil, "allowed card `MODEL`: catalog key, pattern with * or x- key (repeatable; default any)")
	f.StringSliceVar(&o.vendors, "vendor", nil, "allowed `VENDOR`: nvidia, amd, hygon, mthreads, huawei, kunlunxin (repeatable; default any)")
	f.StringVar(&o.minMem, "min-mem", "", "least memory per card, such as 24GiB (default no minimum)")
	f.Float64Var(&o.minCU, "min-cu", 0, "least compute per card in A100 units (default no minimum)")
	f.IntVar(&o.perNode, "per-node", 0, "exactly N cards on each node used (a gang job)")
	f.BoolVar(&o.oneNode, "one-node", false, "all cards on one node")
	f.BoolVar(&o.mixedModels, "mixed-models", false, "let one node's share hold cards of more than one model (default: one model per share)")
	f.BoolVar(&o.allowSim, "allow-simulated", false, "let the job run on simulated cards (suppliers started with gpumesh node --sim); for demos and tests")
	f.Float64Var(&o.maxPrice, "max-price", 0, "most paid per card-hour in CNY (default: see above)")
	f.BoolVar(&o.preemptible, "preemptible", false, "run cheaper; may be stopped and placed again for on-demand jobs")
	f.BoolVar(&o.service, "service", false, "a service: keeps running until cancelled; replaced when a copy exits")
	f.IntVar(&o.replicas, "replicas", 1, "copies of a service, each on its own node (implies --service)")
	f.IntVar(&o.port, "port", 0, "the TCP `PORT` a service listens on: nodes proxy /v1/jobs/ID/http/ to its ready replicas")
	f.StringVar(&o.readyPath, "ready-path", "", "a service's readiness probe: an HTTP `PATH` answered 2xx or 3xx (default: a TCP connect to --port)")
	f.BoolVar(&o.public, "public", false, "let nodes with an --ingress serve the service to anyone, without your key")
	f.StringVar(&o.elastic, "elastic", "", "let the job be scaled between `MIN:MAX` cards (gpumesh scale)")
	f.DurationVar(&o.duration, "duration", 0, "how long the job is expected to run, such as 2h (weighs suppliers' availability)")
	f.StringVar(&o.name, "name", "", "a label for people")
	f.StringVar(&o.network, "net", "", "the network the job needs: none, egress (the public internet) or host (default none; a --per-node gang across nodes also gets a private network between its shares)")
	f.StringVar(&o.memory, "memory", "", "the most memory each share may use on its node, such as 16GiB (default the supplier's cap)")
	f.IntVar(&o.pids, "pids", 0, "the most processes and threads each share may have (default the supplier's cap)")
	f.IntVar(&o.cpuWeight, "cpu-weight", 0, "each share's CPU weight against other jobs on its node, 1-10000 (default 100)")
	f.StringArrayVar(&o.env, "env", nil, "set `NAME=VALUE` in the job's environment (repeatable)")
	f.StringArrayVar(&o.images, "image", nil, "run in the OCI image `[VENDOR=]REF` (repeatable: one per vendor, such as nvidia=REF; tags are resolved to digests here)")
	f.StringVar(&payload, "payload", "", "send `DIR` (as chunks the node lacks) and restore it into the job's working directory")
	f.StringArrayVar(&df.inputs, "input", nil, "stage `SRC[:PATH]` into the working directory (PATH, default the directory itself) before the command starts: s3://BUCKET/PREFIX, or a local directory sent as --payload is (repeatable)")
	f.StringArrayVar(&df.outputs, "output", nil, "send `PATH:s3://BUCKET/PREFIX` (a file or directory of the working directory) to object storage after the command ends (repeatable)")
	f.StringArrayVar(&df.secrets, "secret", nil, "give the job's runners the secret `NAME[=VALUE]` as an environment variable (the value from your environment when not given; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION reach --input/--output's storage) (repeatable)")
	f.StringVar(&o.id, "id", "", "the job ID (default: a new random one)")
	f.BoolVar(&wait, "wait", false, "wait until the job ends and exit with its status")
	f.DurationVar(&retryFor, "retry-for", client.DefaultSubmitRetry, "submit again with the same ID while the node answers 429 or 503, for at most this long (0: never)")
	f.BoolVar(&asJSON, "json", false, "print the job's record as JSON instead of its ID")
	af.registerOwner(cmd)
	return cmd
}

// newJobID makes a job ID from crypto/rand.
func newJobID() (string, error) {
	b := make([]byte, market.JobIDRandomBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a job ID: %w", err)
	}
	return market.NewJobID(b)
}

// submitError explains a failed submit. When the node may have taken the job
// (the exchange broke off, or it answered 5xx), it says how to retry safely.
func submitError(err error, id string) error {
	var ue *client.UnreachableError
	var ae *client.APIError
	switch {
	case errors.As(err, &ue):
	case errors.As(err, &ae) && ae.Status < 500:
	default:
		return fmt.Errorf("%w (job %s may have been submitted: check with `gpumesh job %s`, or submit again with --id %s)", apiError(err, specFlags), id, id, id)
	}
	return apiError(err, specFlags)
}

// waitForJob waits until the job ends and returns the exit status --wait
// promises. While it waits it says on stderr what the job is waiting for,
// each time that changes (see waitNotes).
func waitForJob(ctx context.Context, e env, c *client.Client, id string, asJSON bool) error {
	rec, err := c.Wait(ctx, id, client.WaitOptions{OnChange: waitNotes(e.stderr)})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped waiting; job %s goes on (`gpumesh cancel %s` stops it)", id, id)
		}
		return apiError(err, nil)
	}
	if asJSON {
		if err := writeJSON(e.stdout, rec); err != nil {
			return err
		}
	}
	code, msg := jobExit(rec)
	if msg != "" {
		fmt.Fprintf(e.stderr, "gpumesh: %s\n", msg)
	}
	if code != 0 {
		return exitCodeError{code}
	}
	return nil
}

// jobExit maps a terminal job to the exit status of `submit --wait` and the
// line said on stderr: 0 and nothing when it succeeded; its exit code (1 to
// 255) when it failed with one; 1 when it failed without one (or with one a
// process cannot exit with) or was cancelled.
func jobExit(rec market.JobRecord) (int, string) {
	why := ""
	if rec.Reason != "" {
		why = ": " + oneLine(rec.Reason)
	}
	switch rec.State {
	case market.JobSucceeded:
		return 0, ""
	case market.JobFailed:
		if c := rec.ExitCode; c != nil {
			if *c >= 1 && *c <= 255 {
				return *c, fmt.Sprintf("job %s failed with exit code %d%s", rec.ID, *c, why)
			}
			return 1, fmt.Sprintf("job %s failed with exit code %d%s", rec.ID, *c, why)
		}
		return 1, fmt.Sprintf("job %s failed%s", rec.ID, why)
	case market.JobCancelled:
		return 1, fmt.Sprintf("job %s was cancelled%s", rec.ID, why)
	}
	return 1, fmt.Sprintf("job %s is %s%s", rec.ID, rec.State, why)
}

// waitNotes returns what submit --wait does with each change of the job it
// waits for: a line on w when the job's reason (what a pending job waits
// for) or, once a reason was said, its state changes, such as
//
//	gpumesh: job j1 is pending: waiting for capacity: 3 of 3 suppliers asked declined: … (3)
//	gpumesh: job j1 is running
//
// The end is left to the final message, and a job that runs without
// waiting says nothing.
func waitNotes(w io.Writer) func(market.JobRecord) {
	said := ""
	return func(rec market.JobRecord) {
		if rec.State.Terminal() || (said == "" && rec.Reason == "") {
			return
		}
		line := fmt.Sprintf("job %s is %s", rec.ID, rec.State)
		if rec.Reason != "" {
			line += ": " + oneLine(rec.Reason)
		}
		if line != said {
			fmt.Fprintf(w, "gpumesh: %s\n", line)
			said = line
		}
	}
}

// sentWhy says why an upload sent what it sent.
func sentWhy(st client.PayloadStats) string {
	switch {
	case st.Uploaded == 0:
		return "the node held all of it"
	case st.UploadedBytes < st.Bytes:
		return fmt.Sprintf("%s of %s the node lacked", text.Count(st.Uploaded, "chunk"), text.Count(st.Chunks, "chunk"))
	}
	return text.Count(st.Uploaded, "chunk")
}

// payloadFlag names the flag a local directory came with.
func payloadFlag(local *localInput) string {
	if local != nil {
		return "--input"
	}
	return "--payload"
}
