package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable Load reads: ICICLE_<SECTION>_<FIELD>, named after the YAML
// keys in upper case (server.read_timeout is ICICLE_SERVER_READ_TIMEOUT).
const EnvPrefix = "ICICLE_"

// EnvORTLib is the environment variable that scripts/ort.sh users already set to the ONNX Runtime
// library. Load copies it to model.ort_library when neither the YAML file nor ICICLE_MODEL_ORT_LIBRARY
// set a path.
const EnvORTLib = "ICICLE_ORT_LIB"

// FieldError is one problem with one configuration key. Load and Validate return every FieldError found,
// joined with errors.Join; use errors.As, or walk Unwrap() []error, to read them one by one.
type FieldError struct {
	// Key is the YAML key path, such as "decode.beam_width", or "elasticsearch.addresses[1]" for a list
	// item.
	Key string
	// Env is the environment variable the value came from; "" when it came from YAML or the defaults.
	Env string
	// Line is the line in the YAML file; 0 when the value did not come from YAML or the line is unknown.
	Line int
	// Msg says what is wrong and quotes the bad value.
	Msg string
}

// Error formats the error as `key (env VAR) (line N): message`, leaving out what is unknown.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Key)
	if e.Env != "" {
		fmt.Fprintf(&b, " (env %s)", e.Env)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Load builds a Config from the defaults, then the YAML file at path (skipped when path is ""), then the
// environment variables looked up with env (os.LookupEnv in production; nil reads no environment), and
// validates it. All problems found in one stage are reported together: every YAML key of the wrong type
// or unknown, every unparseable variable, every invalid value. An empty variable counts as unset.
func Load(path string, env func(string) (string, bool)) (Config, error) {
	var paths []string
	if path != "" {
		paths = []string{path}
	}
	return LoadFiles(paths, env)
}

// ProfileDirs are where a reader profile named without a path is looked for, in order: the repository's
// config/profiles (relative to the working directory), then the image's /etc/icicle/profiles.
var ProfileDirs = []string{"config/profiles", "/etc/icicle/profiles"}

// EnvProfile is the environment variable naming the reader profile when no -profile flag does.
const EnvProfile = "ICICLE_PROFILE"

// profileKeys are the keys a reader profile may set: the reader's own sections, and the request budget the
// reader needs. A team's cluster, fields, first stage and security stay in the team's file.
var profileKeys = []string{"model.", "decode.", "experimental.", "policy.", "concurrency.", "breaker.",
	"server.request_timeout", "server.write_timeout"}

// ProfilePath finds a reader profile: a path to a YAML file as it is, or a name (b7) looked up as
// NAME.yaml in ProfileDirs.
func ProfilePath(profile string) (string, error) {
	if strings.ContainsRune(profile, '/') || strings.HasSuffix(profile, ".yaml") || strings.HasSuffix(profile, ".yml") {
		return profile, nil
	}
	var tried []string
	for _, dir := range ProfileDirs {
		p := filepath.Join(dir, profile+".yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("reader profile %q: not found (looked for %s)", profile, strings.Join(tried, ", "))
}

// LoadWith builds a Config from the defaults, then the reader profile (a name or a path; "" for none), then
// the team's YAML file at path ("" for none), then the environment, and validates it. A profile may set
// only the reader's keys (profileKeys); Config.Profile names it.
func LoadWith(profile, path string, env func(string) (string, bool)) (Config, error) {
	if profile == "" {
		return Load(path, env)
	}
	pp, err := ProfilePath(profile)
	if err != nil {
		return Config{}, err
	}
	data, err := os.ReadFile(pp)
	if err != nil {
		return Config{}, fmt.Errorf("read reader profile: %w", err)
	}
	probe := Default()
	set := map[string]bool{}
	if err := decodeYAML(data, &probe, set); err != nil {
		return Config{}, fmt.Errorf("decode reader profile %s: %w", pp, err)
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if !strings.Contains(k, ".") || slices.ContainsFunc(profileKeys, func(p string) bool { return strings.HasPrefix(k, p) || k == p }) {
			continue
		}
		errs = append(errs, &FieldError{Key: k, Msg: "a reader profile sets only the reader's settings (" +
			strings.Join(profileKeys, ", ") + "); set this one in your own config file"})
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("reader profile %s: %w", pp, errors.Join(errs...))
	}
	paths := []string{pp}
	if path != "" {
		paths = append(paths, path)
	}
	cfg, err := LoadFiles(paths, env)
	if err != nil {
		return Config{}, err
	}
	cfg.profile = strings.TrimSuffix(filepath.Base(pp), filepath.Ext(pp))
	return cfg, nil
}

// LoadFiles is Load with several YAML files applied in order over the defaults, a later file's keys over an
// earlier's: a reader profile (config/profiles), then the team's own file. The environment comes last.
func LoadFiles(paths []string, env func(string) (string, bool)) (Config, error) {
	cfg := Default()
	explicit := map[string]bool{} // keys that YAML or the environment set

	var errs []error
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("read config: %w", err)
		}
		if err := decodeYAML(data, &cfg, explicit); err != nil {
			errs = append(errs, fmt.Errorf("decode config %s: %w", path, err))
		}
	}
	if env != nil {
		if err := applyEnv(&cfg, env, explicit); err != nil {
			errs = append(errs, fmt.Errorf("read config from environment: %w", err))
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}

	// The default addresses would make a CloudID setting invalid (the client takes one or the other);
	// the user who set only cloud_id meant to replace them.
	if cfg.Elasticsearch.CloudID != "" && !explicit["elasticsearch.addresses"] {
		cfg.Elasticsearch.Addresses = nil
	}
	// The former name of the first-stage policy.
	if cfg.Policy.Mode == PolicyBM25 {
		cfg.Policy.Mode = PolicyFirstStage
	}
	if err := cfg.Validate(); err != nil {
		where := "defaults and environment"
		if len(paths) > 0 {
			where = strings.Join(paths, ", ")
		}
		return Config{}, fmt.Errorf("validate config (%s): %w", where, err)
	}
	return cfg, nil
}

// EnvVars returns, sorted, every environment variable Load reads.
func EnvVars() []string {
	var c Config
	names := []string{EnvORTLib}
	for _, f := range leaves(&c) {
		names = append(names, f.env)
	}
	slices.Sort(names)
	return names
}

// leaf is one settable field of a Config, found by reflection over the yaml tags.
type leaf struct {
	key     string // "server.addr"
	env     string // "ICICLE_SERVER_ADDR"
	serving string // the field's serving tag: "-" for a setting that does not shape a reader's answer
	v       reflect.Value
}

// leaves lists the fields of every section of c, in declaration order.
func leaves(c *Config) []leaf {
	var out []leaf
	root := reflect.ValueOf(c).Elem()
	for i := range root.NumField() {
		sf := root.Type().Field(i)
		section := yamlName(sf)
		if section == "" {
			continue
		}
		sv := root.Field(i)
		for j := range sv.NumField() {
			name := yamlName(sv.Type().Field(j))
			if name == "" {
				continue
			}
			out = append(out, leaf{
				key:     section + "." + name,
				env:     EnvPrefix + strings.ToUpper(section+"_"+name),
				serving: sv.Type().Field(j).Tag.Get("serving"),
				v:       sv.Field(j),
			})
		}
	}
	return out
}

func yamlName(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

var durationType = reflect.TypeFor[time.Duration]()

// applyEnv overrides the fields of cfg whose variable is set and not empty, records where each came from,
// and returns one *FieldError per variable that does not parse.
func applyEnv(cfg *Config, env func(string) (string, bool), explicit map[string]bool) error {
	var errs []error
	from := func(key, name string) {
		if cfg.fromEnv == nil {
			cfg.fromEnv = map[string]string{}
		}
		cfg.fromEnv[key] = name
		explicit[key] = true
	}
	for _, f := range leaves(cfg) {
		raw, ok := env(f.env)
		if !ok || raw == "" {
			continue
		}
		if err := setString(f.v, raw); err != nil {
			errs = append(errs, &FieldError{Key: f.key, Env: f.env, Msg: err.Error()})
			continue
		}
		from(f.key, f.env)
	}
	for _, old := range slices.Sorted(maps.Keys(movedKeys)) {
		now := movedKeys[old]
		name := EnvPrefix + strings.ToUpper(strings.ReplaceAll(old, ".", "_"))
		if raw, ok := env(name); ok && raw != "" {
			errs = append(errs, &FieldError{Key: old, Env: name, Msg: fmt.Sprintf("moved to %s (environment %s)", now,
				EnvPrefix+strings.ToUpper(strings.ReplaceAll(now, ".", "_")))})
		}
	}
	if cfg.Model.ORTLibrary == "" {
		if raw, ok := env(EnvORTLib); ok && raw != "" {
			cfg.Model.ORTLibrary = raw
			from("model.ort_library", EnvORTLib)
		}
	}
	return errors.Join(errs...)
}

// setString parses raw into v according to v's type.
func setString(v reflect.Value, raw string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("invalid duration %q (want a number with a unit, such as \"2s\" or \"200ms\")", raw)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("invalid boolean %q (want true or false)", raw)
		}
		v.SetBool(b)
	case v.CanInt():
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid integer %q", raw)
		}
		v.SetInt(n)
	case v.CanFloat():
		x, err := strconv.ParseFloat(strings.TrimSpace(raw), v.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid number %q", raw)
		}
		v.SetFloat(x)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var items []string
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		v.Set(reflect.ValueOf(items))
	default:
		// A new field of an unsupported type: fail loudly in tests rather than ignore the variable.
		return fmt.Errorf("no environment parser for type %s", v.Type())
	}
	return nil
}

// decodeYAML decodes data strictly onto cfg (unknown and duplicate keys are errors) and marks every key
// present in the file as explicit. Errors are *FieldError naming the key path and line.
func decodeYAML(data []byte, cfg *Config, explicit map[string]bool) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file changes nothing
		}
		return fmt.Errorf("parse yaml: %w", err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return fmt.Errorf("parse yaml: %w", err)
		}
		return fmt.Errorf("line %d: more than one YAML document; a config file holds one", next.Line)
	}

	ix := yamlIndex{keys: map[int][]string{}, values: map[int][]string{}, all: explicit}
	ix.walk(&root, "")

	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	err := strict.Decode(cfg)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("parse yaml: %w", err)
	}
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		errs = append(errs, ix.fieldError(msg))
	}
	return errors.Join(errs...)
}

// yamlIndex maps lines of a YAML document to the key paths on them, because yaml.v3 type errors carry
// only a line number.
type yamlIndex struct {
	keys   map[int][]string // line -> paths of the keys on it
	values map[int][]string // line -> paths of the scalar values on it
	all    map[string]bool  // every key path in the document
}

func (ix *yamlIndex) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			ix.walk(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			ix.keys[k.Line] = append(ix.keys[k.Line], p)
			ix.all[p] = true
			ix.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			ix.walk(c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.ScalarNode, yaml.AliasNode:
		ix.values[n.Line] = append(ix.values[n.Line], path)
	}
}

// removedKeys are keys that earlier versions accepted and that did nothing; a file that still has one
// gets this reason instead of "unknown key".
var removedKeys = map[string]string{
	"model.kv_cache_tokens": "removed (it was never used): each model session's KV cache is sized per request from the prompt and the decode tree; delete the key",
}

// CurrentKey is a key's name now: the earlier name of a key that moved (decode.scoring) becomes its current
// one (experimental.scoring); any other key is returned as it is. A gate fitted by an earlier version
// recorded its serving settings under the earlier names.
func CurrentKey(key string) string {
	if now, ok := movedKeys[key]; ok {
		return now
	}
	return key
}

// ServingSettings are the settings that shape a reader's answer, by key with their values as text: every
// key of the decode and experimental sections (but those tagged serving:"-") and model.quantized. A
// reader's gate records them when it is fitted (`icicle calibrate`), and is not applied under others; a new
// key is recorded and compared without being listed anywhere.
func (c Config) ServingSettings() map[string]string {
	out := map[string]string{"model.quantized": strconv.FormatBool(c.Model.Quantized)}
	for _, f := range leaves(&c) {
		section, _, _ := strings.Cut(f.key, ".")
		if section != "decode" && section != "experimental" || f.serving == "-" {
			continue
		}
		out[f.key] = settingText(f.v)
	}
	return out
}

// settingText is a setting's value as text, as the gate records it.
func settingText(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// movedKeys are keys that earlier versions read elsewhere: the readers' research settings, now in the
// experimental section. A file or variable that still uses the old name gets the new one.
var movedKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"max_summary_tokens", "max_prompt_tokens", "title_only", "summary_candidates",
		"snippet_chars", "scoring", "copy_log_prior", "copy_rank_prior", "memory_scope", "memory_rank_prior",
		"block_reading", "block_store_mb", "block_precision", "block_fill", "block_dir"} {
		m["decode."+k] = "experimental." + k
	}
	for _, k := range []string{"min_copy_prob", "min_top_score", "fusion_k", "run_model_when_gate_never",
		"route_by_first_stage"} {
		m["policy."+k] = "experimental." + k
	}
	return m
}()

var (
	lineRe      = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownRe   = regexp.MustCompile(`^field (.+) not found in type `)
	duplicateRe = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
	collRe      = regexp.MustCompile(`^cannot unmarshal !!(seq|map) `)
	indexRe     = regexp.MustCompile(`\[\d+\]$`)
)

// fieldError turns one yaml.v3 TypeError message ("line 3: field adr not found in type config.Server")
// into a *FieldError with the key path ("server.adr").
func (ix *yamlIndex) fieldError(msg string) *FieldError {
	m := lineRe.FindStringSubmatch(msg)
	if m == nil {
		return &FieldError{Key: "(document)", Msg: msg}
	}
	line, _ := strconv.Atoi(m[1])
	text := m[2]
	fe := &FieldError{Line: line, Msg: text}

	if u := unknownRe.FindStringSubmatch(text); u != nil {
		fe.Key = ix.keyNamed(line, u[1])
		fe.Msg = fmt.Sprintf("unknown key %q", u[1])
		if why, ok := removedKeys[fe.Key]; ok {
			fe.Msg = why
		} else if now, ok := movedKeys[fe.Key]; ok {
			fe.Msg = "moved to " + now
		}
	} else if d := duplicateRe.FindStringSubmatch(text); d != nil {
		name, err := strconv.Unquote(d[1])
		if err != nil {
			name = d[1]
		}
		fe.Key = ix.keyNamed(line, name)
		fe.Msg = fmt.Sprintf("duplicate key %q (first at line %s)", name, d[2])
	} else {
		fe.Key = ix.valueAt(line)
		// A collection in place of a scalar is reported at the collection's first element or key.
		if c := collRe.FindStringSubmatch(text); c != nil {
			switch c[1] {
			case "seq":
				fe.Key = indexRe.ReplaceAllString(fe.Key, "")
			case "map":
				if i := strings.LastIndexByte(fe.Key, '.'); i >= 0 && slices.Contains(ix.keys[line], fe.Key) {
					fe.Key = fe.Key[:i]
				}
			}
		}
	}
	if strings.HasSuffix(text, " into time.Duration") {
		fe.Msg += ` (want a duration with a unit, such as "2s" or "200ms")`
	}
	if fe.Key == "" {
		fe.Key = "(document)"
	}
	return fe
}

// keyNamed returns the path of the key called name on line, or the bare name when none matches.
func (ix *yamlIndex) keyNamed(line int, name string) string {
	for _, p := range ix.keys[line] {
		if p == name || strings.HasSuffix(p, "."+name) {
			return p
		}
	}
	return name
}

// valueAt returns the path of the first scalar value on line, else of the last key on it.
func (ix *yamlIndex) valueAt(line int) string {
	if ps := ix.values[line]; len(ps) > 0 {
		return ps[0]
	}
	if ps := ix.keys[line]; len(ps) > 0 {
		return ps[len(ps)-1]
	}
	return ""
}
