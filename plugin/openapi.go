package plugin

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// openAPISpec is the OpenAPI 3.0 description of every endpoint; openapi_test.go holds the handlers to it.
//
//go:embed openapi.yaml
var openAPISpec []byte

// OpenAPISpec returns the server's OpenAPI 3.0 description (YAML), as GET /openapi.yaml serves it.
func OpenAPISpec() []byte { return append([]byte(nil), openAPISpec...) }

// serveOpenAPI serves GET /openapi.yaml.
func serveOpenAPI(c *gin.Context) { c.Data(http.StatusOK, "application/yaml", openAPISpec) }
