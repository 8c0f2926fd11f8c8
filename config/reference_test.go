package config

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"
)

// referencePath is the configuration reference, generated from the Config structs' doc comments and
// Default(): `go test ./config -run TestReference -update` rewrites it.
const referencePath = "../docs/configuration.md"

// TestReference keeps docs/configuration.md equal to what the code says: every key with its variable, type,
// default and the first sentence of its doc comment. A key added without a doc comment fails here.
func TestReference(t *testing.T) {
	got := reference(t)
	if *update {
		require.NoError(t, os.WriteFile(referencePath, []byte(got), 0o644))
	}
	want, err := os.ReadFile(referencePath)
	require.NoError(t, err, "run go test ./config -run TestReference -update")
	require.Equal(t, string(want), got, "docs/configuration.md is stale: go test ./config -run TestReference -update")
}

// structDocs reads config.go and returns, per struct type name, its doc comment and each field's.
func structDocs(t *testing.T) (types map[string]string, fields map[string]map[string]string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "config.go", nil, parser.ParseComments)
	require.NoError(t, err)
	types, fields = map[string]string{}, map[string]map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			types[ts.Name.Name] = gd.Doc.Text()
			fields[ts.Name.Name] = map[string]string{}
			for _, fl := range st.Fields.List {
				for _, n := range fl.Names {
					fields[ts.Name.Name][n.Name] = fl.Doc.Text()
				}
				// A comment over several names ("Summary, Seen, Vector and VectorModel are ...") documents each.
			}
		}
	}
	return types, fields
}

// firstSentence is the doc comment's first sentence, without the identifier that starts it.
func firstSentence(name, doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if i := strings.Index(doc, ". "); i >= 0 {
		doc = doc[:i+1]
	}
	for _, lead := range []string{name + " is ", name + " are ", name + " "} {
		if rest, ok := strings.CutPrefix(doc, lead); ok {
			doc = rest
			break
		}
	}
	r := []rune(doc)
	if len(r) > 0 {
		r[0] = unicode.ToUpper(r[0])
	}
	return strings.ReplaceAll(string(r), "|", `\|`)
}

func typeName(tp reflect.Type) string {
	switch {
	case tp == reflect.TypeFor[time.Duration]():
		return "duration"
	case tp.Kind() == reflect.Slice:
		return "list of " + typeName(tp.Elem())
	case tp.Kind() == reflect.Float64:
		return "number"
	case tp.Kind() == reflect.Int || tp.Kind() == reflect.Int64:
		return "integer"
	case tp.Kind() == reflect.Bool:
		return "boolean"
	}
	return tp.Kind().String()
}

func defaultText(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.String:
		return fmt.Sprintf("%q", v.String())
	case v.Kind() == reflect.Slice:
		items := make([]string, v.Len())
		for i := range items {
			items[i] = v.Index(i).String()
		}
		return "[" + strings.Join(items, ", ") + "]"
	case v.Kind() == reflect.Float64 && math.IsInf(v.Float(), -1):
		return "-inf"
	}
	return fmt.Sprint(v.Interface())
}

// reference renders docs/configuration.md.
func reference(t *testing.T) string {
	t.Helper()
	types, fields := structDocs(t)
	var b strings.Builder
	b.WriteString(`# Configuration reference

Generated from the code (config/config.go) by ` + "`go test ./config -run TestReference -update`" + `; a test fails
when it is stale. Load order: defaults, then a reader profile (` + "`-profile NAME`" + `, config/profiles), then the
YAML file (` + "`-config FILE`" + `), then the environment. Every key has a variable ICICLE_<SECTION>_<KEY>; lists
are comma-separated there, and an empty variable counts as unset. Durations take a unit ("2s", "200ms").
` + "`config/example.yaml`" + ` shows the keys a team sets to plug the sidecar in.
`)
	root := reflect.TypeFor[Config]()
	def := reflect.ValueOf(Default())
	for i := range root.NumField() {
		sf := root.Field(i)
		section := yamlName(sf)
		if section == "" {
			continue
		}
		typ := sf.Type.Name()
		require.NotEmpty(t, fields[typ], "section %s (type %s) not found in config.go", section, typ)
		doc := types[typ]
		require.NotEmpty(t, doc, "type %s has no doc comment", typ)
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", section, strings.Join(strings.Fields(doc), " "))
		b.WriteString("| key | environment | type | default | what |\n|---|---|---|---|---|\n")
		st := sf.Type
		for j := range st.NumField() {
			f := st.Field(j)
			name := yamlName(f)
			if name == "" {
				continue
			}
			fd := fields[typ][f.Name]
			if fd == "" {
				// Fields sharing one comment ("Summary, Seen, Vector and VectorModel are the sidecar's own
				// fields") take the comment of the first field of the group.
				for k := j - 1; k >= 0 && fd == ""; k-- {
					if d := fields[typ][st.Field(k).Name]; d != "" && strings.Contains(d, f.Name) {
						fd = d
					}
				}
			}
			require.NotEmpty(t, fd, "%s.%s (%s.%s) has no doc comment: every key needs one", section, name, typ, f.Name)
			fmt.Fprintf(&b, "| `%s.%s` | `%s` | %s | `%s` | %s |\n", section, name,
				EnvPrefix+strings.ToUpper(section+"_"+name), typeName(f.Type), defaultText(def.Field(i).Field(j)),
				firstSentence(f.Name, fd))
		}
	}
	return b.String()
}
