package integration

// These tests check docker-compose.yml, the Dockerfile and .dockerignore statically: the compose file is
// parsed with compose-go as `docker compose config` would, and the Dockerfile is read line by line. They
// show that the files agree with each other, with config.Load and with the repository, in seconds and
// without a container engine; they carry no build tag, so plain `go test ./...` runs them.
// integration/container_test.go (build tag container, scripts/container.sh test) builds the image and runs
// the stack for real.

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/config"
)

const (
	esService     = "elasticsearch"
	ingestService = "ingest"
	icicleService = "icicle"
	esPort        = 9200
	iciclePort    = 8080
	// imageConfig is where the image keeps config/example.yaml, the file its commands are given.
	imageConfig = "/etc/icicle/config.yaml"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	return root
}

// loadCompose parses docker-compose.yml as `docker compose config` would on a machine with an empty
// environment: interpolation runs (so every ${VAR:-default} takes its default), but nothing is read from
// the host environment or env files.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root := repoRoot(t)
	path := filepath.Join(root, "docker-compose.yml")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	project, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: path, Content: data}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SkipResolveEnvironment = true
	})
	require.NoError(t, err, "parse %s", path)
	return project
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	require.NoError(t, err, "docker-compose.yml must define service %q", name)
	return s
}

// stage is one FROM ... section of a Dockerfile, continuation lines joined.
type stage struct {
	name  string
	from  string   // the FROM argument: an image, ${ARG} or an earlier stage
	lines []string // instructions, comments dropped
}

func (s stage) instructions(keyword string) [][]string {
	var out [][]string
	for _, l := range s.lines {
		f := strings.Fields(l)
		if len(f) > 0 && strings.EqualFold(f[0], keyword) {
			out = append(out, f[1:])
		}
	}
	return out
}

// exec returns the JSON (exec) form of a CMD or ENTRYPOINT instruction; the last one counts.
func (s stage) exec(t *testing.T, keyword string) []string {
	t.Helper()
	all := s.instructions(keyword)
	require.NotEmpty(t, all, "stage %s has no %s", s.name, keyword)
	var out []string
	require.NoError(t, json.Unmarshal([]byte(strings.Join(all[len(all)-1], " ")), &out),
		"%s of stage %s must be in exec form, [\"...\"]", keyword, s.name)
	return out
}

// env returns the variables the stage sets with ENV (k=v pairs or the legacy "ENV k v").
func (s stage) env() map[string]string {
	out := map[string]string{}
	for _, args := range s.instructions("ENV") {
		if len(args) == 2 && !strings.Contains(args[0], "=") {
			out[args[0]] = args[1]
			continue
		}
		for _, kv := range args {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// dockerfile is a parsed Dockerfile: the ARGs before the first FROM (name -> default) and the stages.
type dockerfile struct {
	args   map[string]string
	stages []stage
}

func (d dockerfile) runtime() stage { return d.stages[len(d.stages)-1] }

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	d := dockerfile{args: map[string]string{}}
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.Fields(line)
		switch {
		case strings.EqualFold(f[0], "FROM"):
			st := stage{from: f[1]}
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				st.name = f[3]
			}
			d.stages = append(d.stages, st)
		case len(d.stages) > 0:
			d.stages[len(d.stages)-1].lines = append(d.stages[len(d.stages)-1].lines, line)
		case strings.EqualFold(f[0], "ARG"):
			k, v, _ := strings.Cut(f[1], "=")
			d.args[k] = v
		}
	}
	for raw := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "#") {
			continue // comments (and the syntax directive) may sit inside a continued instruction
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	require.NotEmpty(t, d.stages, "%s has no FROM", path)
	return d
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	require.ElementsMatch(t, []string{esService, ingestService, icicleService}, p.ServiceNames())
}

// esVersion is the Elasticsearch version scripts/es.sh runs by default (its ES_VERSION's default), which the
// tests use.
func esVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "es.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ES_VERSION=(?:\$\{ICICLE_ES_VERSION:-)?([0-9.]+)\}?$`).FindSubmatch(raw)
	require.NotNil(t, m, "scripts/es.sh has no ES_VERSION=<version> or ES_VERSION=${ICICLE_ES_VERSION:-<version>}")
	return string(m[1])
}

func TestComposeElasticsearchImage(t *testing.T) {
	es := service(t, loadCompose(t), esService)
	require.Equal(t, "docker.elastic.co/elasticsearch/elasticsearch:"+esVersion(t), es.Image,
		"the official image, at the version the tests run (scripts/es.sh)")
	require.Equal(t, "single-node", deref(es.Environment["discovery.type"]))
	require.Equal(t, "false", deref(es.Environment["xpack.security.enabled"]))
}

func TestComposePortsAndHealth(t *testing.T) {
	p := loadCompose(t)
	for _, tt := range []struct {
		service string
		port    uint32
		probe   string
	}{
		{esService, esPort, "_cluster/health"},
		{icicleService, iciclePort, "/readyz"},
	} {
		t.Run(tt.service, func(t *testing.T) {
			s := service(t, p, tt.service)
			published := slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool {
				return pc.Target == tt.port && pc.Published == itoa(tt.port) && pc.HostIP == "127.0.0.1"
			})
			require.True(t, published, "%s must publish 127.0.0.1:%d:%d by default, got %+v",
				tt.service, tt.port, tt.port, s.Ports)

			require.NotNil(t, s.HealthCheck, "%s needs a healthcheck", tt.service)
			require.False(t, s.HealthCheck.Disable)
			test := strings.Join(s.HealthCheck.Test, " ")
			require.Contains(t, test, itoa(tt.port), "the healthcheck probes the service port")
			require.Contains(t, test, tt.probe)
		})
	}
	require.Empty(t, service(t, p, ingestService).Ports, "the ingest job serves nothing")
}

// TestComposeOrder: the ingest job waits for a healthy node, the sidecar for the node and the job's success.
func TestComposeOrder(t *testing.T) {
	p := loadCompose(t)
	ingest := service(t, p, ingestService)
	require.Equal(t, types.ServiceConditionHealthy, ingest.DependsOn[esService].Condition)
	require.Equal(t, "no", ingest.Restart, "a one-shot job")

	icicle := service(t, p, icicleService)
	require.Equal(t, types.ServiceConditionHealthy, icicle.DependsOn[esService].Condition)
	require.Equal(t, types.ServiceConditionCompletedSuccessfully, icicle.DependsOn[ingestService].Condition)
}

// TestComposeCommands: the sidecar runs the image's own command (serve with the image's config), and the
// job ingests the default corpus, which exists, from the directory compose mounts.
func TestComposeCommands(t *testing.T) {
	root := repoRoot(t)
	p := loadCompose(t)
	runtime := parseDockerfile(t, filepath.Join(root, "Dockerfile")).runtime()
	require.Equal(t, []string{"/usr/local/bin/icicle"}, runtime.exec(t, "ENTRYPOINT"))
	cmd := runtime.exec(t, "CMD")
	require.Equal(t, []string{"serve", "-config", imageConfig}, cmd, "the image serves by default")

	icicle := service(t, p, icicleService)
	require.Equal(t, cmd, []string(icicle.Command), "compose states the image's command")
	require.Empty(t, icicle.Entrypoint)

	ingest := service(t, p, ingestService)
	require.Equal(t, icicle.Image, ingest.Image, "the job runs the sidecar's image")
	require.Empty(t, ingest.Entrypoint)
	args := []string(ingest.Command)
	require.NotEmpty(t, args)
	require.Equal(t, "ingest", args[0])
	require.Equal(t, imageConfig, flagValue(t, args, "-config"))
	corpus := flagValue(t, args, "-corpus")

	require.Len(t, ingest.Volumes, 1)
	v := ingest.Volumes[0]
	require.Equal(t, types.VolumeTypeBind, v.Type)
	require.True(t, v.ReadOnly, "the job only reads the corpus")
	rel, ok := strings.CutPrefix(corpus, v.Target+"/")
	require.True(t, ok, "-corpus %s lies under the mount %s", corpus, v.Target)
	require.Equal(t, filepath.Join(root, "data"), v.Source, "the default corpus directory is ./data")
	require.FileExists(t, filepath.Join(v.Source, rel), "the default corpus")
}

func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	i := slices.Index(args, name)
	require.True(t, i >= 0 && i+1 < len(args), "%v has no %s VALUE", args, name)
	return args[i+1]
}

// TestComposeEnvironmentLoads feeds each service that runs the image the config file its command names
// (config/example.yaml, which the image holds as imageConfig) and its environment layered over the
// Dockerfile's ENV, as the container sees them, to config.Load.
func TestComposeEnvironmentLoads(t *testing.T) {
	root := repoRoot(t)
	p := loadCompose(t)
	d := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	require.Contains(t, d.runtime().instructions("COPY"), []string{"config/example.yaml", imageConfig})
	image := d.runtime().env()
	known := map[string]bool{}
	for _, name := range config.EnvVars() {
		known[name] = true
	}
	for name := range image {
		if strings.HasPrefix(name, config.EnvPrefix) {
			require.True(t, known[name], "Dockerfile runtime ENV %s is not read by config.Load (see config.EnvVars)", name)
		}
	}

	for _, name := range []string{ingestService, icicleService} {
		t.Run(name, func(t *testing.T) {
			s := service(t, p, name)
			env := map[string]string{}
			for k, v := range image {
				env[k] = v
			}
			for k, v := range s.Environment {
				require.NotNil(t, v, "compose sets %s without a value (it would come from the host)", k)
				if strings.HasPrefix(k, config.EnvPrefix) {
					require.True(t, known[k], "compose sets %s, which config.Load does not read (see config.EnvVars)", k)
				}
				if old, ok := image[k]; ok && strings.HasPrefix(k, config.EnvPrefix) {
					require.Equal(t, old, *v, "compose and the Dockerfile disagree on %s", k)
				}
				env[k] = *v
			}
			require.NotContains(t, env, "ICICLE_MODEL_DIR", "no reader model is configured")

			cfg, err := config.Load(filepath.Join(root, "config", "example.yaml"), func(k string) (string, bool) {
				v, ok := env[k]
				return v, ok
			})
			require.NoError(t, err)
			require.Equal(t, []string{"http://" + esService + ":" + itoa(esPort)}, cfg.Elasticsearch.Addresses)
			require.Empty(t, cfg.Model.Dir, "the container serves the default: the first stage, no reader model")
			require.Equal(t, "/"+config.Default().FirstStage.EncoderDir, cfg.FirstStage.EncoderDir, "and the default encoder")
			require.NotEmpty(t, cfg.Model.ORTLibrary, "the image must say where libonnxruntime.so is")

			_, port, err := net.SplitHostPort(cfg.Server.Addr)
			require.NoError(t, err)
			require.Equal(t, itoa(iciclePort), port, "the sidecar must listen on the port compose publishes")
		})
	}
}

// pinnedImage: an image reference with a tag that names a version or a date (not latest) and a digest.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]*[0-9][A-Za-z0-9._-]*@sha256:[0-9a-f]{64}$`)

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	p := loadCompose(t)
	icicle := service(t, p, icicleService)
	require.NotNil(t, icicle.Build, "icicle is built from the repository")
	require.Equal(t, root, icicle.Build.Context)
	require.Equal(t, icicle.Build, service(t, p, ingestService).Build, "the job builds the same image")
	dockerfilePath := filepath.Join(icicle.Build.Context, icicle.Build.Dockerfile)
	require.FileExists(t, dockerfilePath)
	d := parseDockerfile(t, dockerfilePath)
	runtime := d.runtime()

	// Every base image is a build argument whose default is pinned by tag and digest (a machine that cannot
	// pull them passes its own; scripts/container.sh does).
	names := map[string]bool{}
	for _, st := range d.stages {
		if st.from == "scratch" || names[st.from] {
			names[st.name] = true
			continue
		}
		names[st.name] = true
		arg, ok := strings.CutPrefix(st.from, "${")
		require.True(t, ok, "stage %s: FROM %s: base images are build arguments", st.name, st.from)
		arg = strings.TrimSuffix(arg, "}")
		require.Regexp(t, pinnedImage, d.args[arg], "ARG %s: pin the default by exact tag and digest", arg)
	}

	var exposed []string
	for _, args := range runtime.instructions("EXPOSE") {
		for _, a := range args {
			exposed = append(exposed, strings.TrimSuffix(a, "/tcp"))
		}
	}
	for _, pc := range icicle.Ports {
		require.Contains(t, exposed, itoa(pc.Target), "the image must EXPOSE the port compose publishes")
	}
	require.NotEmpty(t, runtime.instructions("HEALTHCHECK"))
	require.NotEmpty(t, runtime.instructions("USER"), "the image runs as an unprivileged user")

	// The stages before the runtime run the native scripts and build the binary with both native tags and cgo.
	var build string
	for _, st := range d.stages[:len(d.stages)-1] {
		build += strings.Join(st.lines, "\n") + "\n"
	}
	for _, want := range []string{
		"scripts/ort.sh", "scripts/tokenizers.sh", `-tags "ort tokenizers nomsgpack"`, "CGO_ENABLED=1", "./cmd/icicle",
	} {
		require.Contains(t, build, want)
	}
	// The image carries the encoder the configured first stage opens: fetched into the models directory the
	// runtime stage copies, and first_stage.encoder_dir points at it.
	encoder := config.Default().FirstStage.EncoderDir
	require.Contains(t, build, "scripts/encoder.sh")
	require.Contains(t, build, encoder)
	require.FileExists(t, filepath.Join(root, encoder, "encoder.json"))
	require.Contains(t, strings.Join(runtime.lines, "\n"), "ICICLE_FIRST_STAGE_ENCODER_DIR=/"+encoder)
	// It serves the default, the first stage without a reader model: neither the image nor compose names one,
	// and no stage builds one.
	require.NotContains(t, build, "scripts/model.sh")
	require.NotContains(t, strings.Join(runtime.lines, "\n"), "ICICLE_MODEL_DIR")
	require.NotContains(t, icicle.Environment, "ICICLE_MODEL_DIR")

	// Every file COPY takes from the build context exists and is not excluded by .dockerignore.
	ignore := dockerignore(t, filepath.Join(icicle.Build.Context, ".dockerignore"))
	for _, st := range d.stages {
		for _, args := range st.instructions("COPY") {
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--from=") }) {
				continue
			}
			for _, src := range args[:len(args)-1] {
				if strings.HasPrefix(src, "--") || src == "." {
					continue
				}
				clean := strings.TrimSuffix(src, "/")
				require.FileExists(t, filepath.Join(root, clean), "COPY %s", src)
				require.False(t, ignore.excludes(clean), "COPY %s but .dockerignore excludes it", src)
			}
		}
	}
	// What `COPY . .` must bring for go build, and what must stay out of the context.
	for _, in := range []string{"go.mod", "go.sum", "cmd/icicle/main.go", "config/example.yaml", "plugin/openapi.yaml",
		"scripts/ort.sh", "scripts/tokenizers.sh", "scripts/encoder.sh", encoder + "/encoder.json"} {
		require.FileExists(t, filepath.Join(root, in))
		require.False(t, ignore.excludes(in), ".dockerignore must keep %s in the build context", in)
	}
	for _, out := range []string{".git", "data/nq_qed/corpus.jsonl.gz", "models/reader135/graph.onnx", "training/icicle",
		encoder + "/model.onnx", encoder + "/tokenizer.json", "plugin/server_test.go", "integration/compose_test.go"} {
		require.True(t, ignore.excludes(out), ".dockerignore must keep %s out of the build context", out)
	}
}

// ignoreRules are the patterns of a .dockerignore file, comments and blank lines dropped.
type ignoreRules []string

func dockerignore(t *testing.T, path string) ignoreRules {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out ignoreRules
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// excludes reports whether the rules leave path (slash-separated, relative to the context) out, as Docker
// applies them: the last rule matching the path or one of its parent directories decides, "!" re-includes,
// and a leading "**/" matches in any directory.
func (r ignoreRules) excludes(path string) bool {
	excluded := false
	for _, rule := range r {
		pattern, negated := strings.CutPrefix(rule, "!")
		pattern = strings.Trim(pattern, "/")
		if matchesPathOrParent(pattern, path) {
			excluded = !negated
		}
	}
	return excluded
}

func matchesPathOrParent(pattern, path string) bool {
	parts := strings.Split(path, "/")
	for i := len(parts); i > 0; i-- {
		p := strings.Join(parts[:i], "/")
		if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
			for j := range i {
				if m, _ := filepath.Match(rest, strings.Join(parts[j:i], "/")); m {
					return true
				}
			}
			continue
		}
		if m, _ := filepath.Match(pattern, p); m {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func itoa(n uint32) string {
	return strconv.FormatUint(uint64(n), 10)
}
