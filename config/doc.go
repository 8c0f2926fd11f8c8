// Package config holds the sidecar's configuration: the Config structs with their defaults, Load, and
// Validate.
//
// A configuration is built in three layers, each overriding the one before:
//
//  1. Default(): every field has a default, stated in its doc comment with its unit.
//  2. A YAML file (optional), decoded strictly: an unknown key, a duplicate key or a value of the wrong
//     type is an error that names the key (for example "decode.beam_width") and its line. Durations are
//     strings such as "2s" or "200ms"; min_top_score takes "-.inf".
//  3. Environment variables named ICICLE_<SECTION>_<FIELD> after the YAML keys, for example
//     ICICLE_SERVER_ADDR, ICICLE_MODEL_DIR or ICICLE_ELASTICSEARCH_ADDRESSES (comma-separated). An empty
//     variable counts as unset. EnvVars lists every variable Load reads; ICICLE_ORT_LIB is also honoured
//     as a fallback for model.ort_library.
//
// Load then calls Validate, which reports every problem at once (errors.Join of *FieldError), each naming
// the YAML key, the environment variable when the value came from one, and the bad value.
//
// The package is pure Go and imports no other package of the project; only cmd/ reads a Config and hands
// each constructor its section.
package config
