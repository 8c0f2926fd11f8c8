//go:build ort && tokenizers

package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/icicle-search/sidecar/inference/dense"
	"github.com/icicle-search/sidecar/inference/ort"
)

// BenchmarkEncoder times one query and one passage through each encoder directory that has its files, at 1
// and 2 intra-op threads:
//
//	go test -tags "ort tokenizers" -run '^$' -bench Encoder -count 6 ./inference/loader/ | benchstat -
func BenchmarkEncoder(b *testing.B) {
	lib := os.Getenv("ICICLE_ORT_LIB")
	if lib == "" {
		b.Skip("ICICLE_ORT_LIB not set")
	}
	if err := ort.Init(lib); err != nil {
		b.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join("..", "..", "models", "*", dense.ManifestFile))
	passage := "The Office (U.S. TV series)\n" + strings.Repeat("The Office is an American mockumentary sitcom television series that depicts the everyday work lives of office employees. ", 12)
	for _, m := range dirs {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "model.onnx")); err != nil {
			continue
		}
		for _, threads := range []int{1, 2} {
			enc, err := OpenEncoder(dir, EncoderOptions{Runtime: ort.Options{Threads: threads, InterOpThreads: 1}})
			if err != nil {
				b.Fatal(err)
			}
			name := filepath.Base(dir) + "/threads=" + string(rune('0'+threads))
			b.Run(name+"/query", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := enc.Query(b.Context(), "who sang the theme song for the office"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/passage", func(b *testing.B) {
				for b.Loop() {
					if _, err := enc.Passages(b.Context(), []string{passage}); err != nil {
						b.Fatal(err)
					}
				}
			})
			enc.Close()
		}
	}
}
