package integration

// These tests check docker-compose.yml and the Dockerfile statically, without a Docker engine (none is
// available on the build machines): the compose file is parsed with compose-go as `docker compose config`
// would, and the Dockerfile is read line by line. No image is pulled or built and no container runs, so
// they show that the files are consistent with each other and with config.Load, not that the stack
// starts (README.md, "Users with Docker", says the same). They carry no build tag, so plain
// `go test ./...` runs them.

import (
	"net"
	"os"
	"path/filepath"
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
	icicleService = "icicle"
	esPort        = 9200
	iciclePort    = 8080
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	return root
}

// loadCompose parses docker-compose.yml as `docker compose config` would on a machine with an empty
// environment: interpolation runs (so a ${VAR} without a default would show up as empty), but nothing is
// read from the host environment or env files.
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

func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.Fields(line)
		if strings.EqualFold(f[0], "FROM") {
			st := stage{}
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				st.name = f[3]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
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
	require.NotEmpty(t, stages, "%s has no FROM", path)
	return stages
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	require.ElementsMatch(t, []string{esService, icicleService}, p.ServiceNames())
}

func TestComposeElasticsearchImage(t *testing.T) {
	es := service(t, loadCompose(t), esService)
	repo, tag, ok := strings.Cut(es.Image, ":")
	require.True(t, ok, "pin the Elasticsearch image tag, got %q", es.Image)
	require.Equal(t, "docker.elastic.co/elasticsearch/elasticsearch", repo)
	require.True(t, strings.HasPrefix(tag, "8."), "the adapter speaks go-elasticsearch/v8: want an 8.x image, got %q", tag)
	require.Equal(t, "single-node", deref(es.Environment["discovery.type"]))
	require.Equal(t, "false", deref(es.Environment["xpack.security.enabled"]))
}

func TestComposePortsAndHealth(t *testing.T) {
	p := loadCompose(t)
	for _, tt := range []struct {
		service string
		port    uint32
	}{
		{esService, esPort},
		{icicleService, iciclePort},
	} {
		t.Run(tt.service, func(t *testing.T) {
			s := service(t, p, tt.service)
			published := slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool {
				return pc.Target == tt.port && pc.Published == itoa(tt.port)
			})
			require.True(t, published, "%s must publish %d:%d, got %+v", tt.service, tt.port, tt.port, s.Ports)

			require.NotNil(t, s.HealthCheck, "%s needs a healthcheck", tt.service)
			require.False(t, s.HealthCheck.Disable)
			require.NotEmpty(t, s.HealthCheck.Test)
			require.Contains(t, strings.Join(s.HealthCheck.Test, " "), itoa(tt.port), "the healthcheck probes the service port")
		})
	}
	icicle := service(t, p, icicleService)
	require.Contains(t, strings.Join(icicle.HealthCheck.Test, " "), "/readyz")
	es := service(t, p, esService)
	require.Contains(t, strings.Join(es.HealthCheck.Test, " "), "_cluster/health")
}

func TestComposeDependsOnHealthyElasticsearch(t *testing.T) {
	icicle := service(t, loadCompose(t), icicleService)
	dep, ok := icicle.DependsOn[esService]
	require.True(t, ok, "icicle must depend on elasticsearch")
	require.Equal(t, types.ServiceConditionHealthy, dep.Condition)
}

// TestComposeEnvironmentLoads feeds the icicle service's environment, layered over the Dockerfile's ENV
// as the container sees it, to config.Load.
func TestComposeEnvironmentLoads(t *testing.T) {
	root := repoRoot(t)
	icicle := service(t, loadCompose(t), icicleService)
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	image := stages[len(stages)-1].env()

	env := map[string]string{}
	known := map[string]bool{}
	for _, name := range config.EnvVars() {
		known[name] = true
	}
	for name, v := range image {
		if strings.HasPrefix(name, config.EnvPrefix) {
			require.True(t, known[name], "Dockerfile runtime ENV %s is not read by config.Load (see config.EnvVars)", name)
		}
		env[name] = v
	}
	for name, v := range icicle.Environment {
		require.NotNil(t, v, "compose sets %s without a value (it would come from the host)", name)
		if strings.HasPrefix(name, config.EnvPrefix) {
			require.True(t, known[name], "compose sets %s, which config.Load does not read (see config.EnvVars)", name)
		}
		if old, ok := image[name]; ok && strings.HasPrefix(name, config.EnvPrefix) {
			require.Equal(t, old, *v, "compose and the Dockerfile disagree on %s", name)
		}
		env[name] = *v
	}

	cfg, err := config.Load("", func(k string) (string, bool) {
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
}

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	icicle := service(t, loadCompose(t), icicleService)
	require.NotNil(t, icicle.Build, "icicle is built from the repository")
	require.Equal(t, root, icicle.Build.Context)
	dockerfile := filepath.Join(icicle.Build.Context, icicle.Build.Dockerfile)
	require.FileExists(t, dockerfile)

	stages := parseDockerfile(t, dockerfile)
	runtime := stages[len(stages)-1]

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

	// The builder runs the native scripts and builds the binary with both native tags and cgo.
	var build string
	for _, st := range stages[:len(stages)-1] {
		build += strings.Join(st.lines, "\n") + "\n"
	}
	for _, want := range []string{"scripts/ort.sh", "scripts/tokenizers.sh", `-tags "ort tokenizers"`, "CGO_ENABLED=1", "./cmd/icicle"} {
		require.Contains(t, build, want)
	}
	// The image carries the encoder the configured first stage opens: the builder fetches it into the
	// models directory the runtime stage copies, and the runtime points first_stage.encoder_dir at it.
	encoder := config.Default().FirstStage.EncoderDir
	require.Contains(t, build, "scripts/encoder.sh "+encoder)
	require.FileExists(t, filepath.Join(root, encoder, "encoder.json"))
	require.Contains(t, strings.Join(runtime.lines, "\n"), "ICICLE_FIRST_STAGE_ENCODER_DIR=/"+encoder)
	// It serves the default, the first stage without a reader model: neither the image nor compose names one,
	// and the builder builds none.
	require.NotContains(t, build, "scripts/model.sh")
	require.NotContains(t, strings.Join(runtime.lines, "\n"), "ICICLE_MODEL_DIR")
	require.NotContains(t, icicle.Environment, "ICICLE_MODEL_DIR")

	// Every file COPY takes from the build context exists and is not excluded by .dockerignore.
	ignored := dockerignore(t, filepath.Join(icicle.Build.Context, ".dockerignore"))
	for _, st := range stages {
		for _, args := range st.instructions("COPY") {
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--from=") }) {
				continue
			}
			var srcs []string
			for _, a := range args[:len(args)-1] {
				if !strings.HasPrefix(a, "--") {
					srcs = append(srcs, a)
				}
			}
			for _, src := range srcs {
				if src == "." {
					continue
				}
				clean := strings.TrimSuffix(src, "/")
				require.FileExists(t, filepath.Join(root, clean), "COPY %s", src)
				require.NotContains(t, ignored, clean, "COPY %s but .dockerignore excludes it", src)
			}
		}
	}
	for _, want := range []string{"scripts/ort.sh", "scripts/tokenizers.sh", "config/example.yaml"} {
		require.FileExists(t, filepath.Join(root, want))
		require.NotContains(t, ignored, want)
	}
	for _, dir := range []string{"scripts", "config", "models", "cmd", "go.mod", "go.sum", "training",
		"training/icicle", "training/requirements-graft.txt", "training/requirements-graft-nodeps.txt"} {
		require.NotContains(t, ignored, dir, ".dockerignore must keep %s in the build context (the builder rebuilds the default model with training/'s graft)", dir)
	}
}

// dockerignore returns the patterns of a .dockerignore file, comments and blank lines dropped.
func dockerignore(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
		}
	}
	return out
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
