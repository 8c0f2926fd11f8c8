//go:build tools

// Package deps pins modules the project uses before their first import lands.
package deps

import (
	_ "github.com/compose-spec/compose-go/v2/loader"
	_ "github.com/daulet/tokenizers"
	_ "github.com/elastic/go-elasticsearch/v8"
	_ "github.com/gin-gonic/gin"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/sony/gobreaker/v2"
	_ "github.com/stretchr/testify/require"
	_ "github.com/yalue/onnxruntime_go"
	_ "go.uber.org/goleak"
	_ "go.yaml.in/yaml/v3"
)
