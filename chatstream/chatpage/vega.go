package chatpage

import (
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The pinned versions of the chart libraries the page loads.
const (
	VegaVersion            = "6.4.0"
	VegaLiteVersion        = "6.5.0"
	VegaEmbedVersion       = "7.3.0"
	VegaInterpreterVersion = "2.3.2"
)

// DefaultVegaCDN is the URL prefix of the public CDN the page loads the
// chart libraries from by default: a file of package p at version v is
// DefaultVegaCDN + p + "@" + v + "/build/...".
const DefaultVegaCDN = "https://cdn.jsdelivr.net/npm/"

// vegaFile is one build file of a pinned npm package, with the
// Subresource Integrity of its bytes (the npm tarball's build/ file,
// which the CDN serves unchanged).
type vegaFile struct {
	pkg, version, path, integrity string
	module                        bool // an ES module (imported, not a classic script)
}

// vegaFiles are loaded in this order: vega, vega-lite and vega-embed as
// classic scripts defining window.vega, vegaLite and vegaEmbed; then
// vega-interpreter as an ES module, which evaluates chart expressions
// without eval or new Function.
var vegaFiles = []vegaFile{
	{"vega", VegaVersion, "build/vega.min.js", "sha384-VKdcJr3ZaBIJMbVcopTAI/JEuUkSY6qnwVu9iLuw0DnQ9gQ1JjsfZJhXFQAgNi43", false},
	{"vega-lite", VegaLiteVersion, "build/vega-lite.min.js", "sha384-pV2l7nzmyxZh02knvUH7N8zvtyCYsYiGt+SsE/emG/dFiBI6G0YJZFZ2FzEX72P3", false},
	{"vega-embed", VegaEmbedVersion, "build/vega-embed.min.js", "sha384-Muy1QRxYFeNrA1zShc1KtN4OfipkR/61gt+HWqN57c1Zxu3Oe16TsilsruVVjfKL", false},
	{"vega-interpreter", VegaInterpreterVersion, "build/vega-interpreter.js", "sha384-c7gD0lkUpIBMwuO4gb+ILV2W9bWR7lrvqZf5HT0gUAWbtSMuGGkgsGz3gniXTIqM", true},
}

// localName is the file name under the handler's /vega/ path when the
// files are served from a node_modules folder.
func (f vegaFile) localName() string { return f.pkg + ".js" }

// cdnURL is the file's URL under the CDN prefix.
func (f vegaFile) cdnURL(prefix string) string {
	return prefix + f.pkg + "@" + f.version + "/" + f.path
}

// Vega holds the pinned build files of the chart libraries, read from a
// node_modules folder by [LoadVega], for [WithVega]. It is immutable and
// may be given to several handlers.
type Vega struct {
	files map[string][]byte // by local name
}

// LoadVega reads the build files of the pinned npm packages (vega 6.4.0,
// vega-lite 6.5.0, vega-embed 7.3.0, vega-interpreter 2.3.2) from a
// node_modules folder, for [WithVega]. It returns an error when a file
// cannot be read or is not the pinned version, byte for byte: the page
// keeps its integrity attributes whatever the source.
func LoadVega(dir string) (*Vega, error) {
	out := make(map[string][]byte, len(vegaFiles))
	for _, f := range vegaFiles {
		p := filepath.Join(dir, f.pkg, filepath.FromSlash(f.path))
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("chatpage: LoadVega: %w (install %s@%s there)", err, f.pkg, f.version)
		}
		if got := integrity(b); got != f.integrity {
			return nil, fmt.Errorf("chatpage: LoadVega: %s is not %s@%s (integrity %s, want %s)", p, f.pkg, f.version, got, f.integrity)
		}
		out[f.localName()] = b
	}
	return &Vega{files: out}, nil
}

// integrity returns the sha384 Subresource Integrity value of b.
func integrity(b []byte) string {
	sum := sha512.Sum384(b)
	return "sha384-" + base64.StdEncoding.EncodeToString(sum[:])
}

// normalizePrefix makes a URL prefix end with one slash.
func normalizePrefix(p string) string {
	return strings.TrimRight(p, "/") + "/"
}
