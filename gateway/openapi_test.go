package gateway

// The tests of docs/openapi.yaml: the spec is held against the route
// table (both ways), against the handlers (which body each decodes, which
// query parameters each takes), against the Go types of package api (by
// reflection, field by field, at every depth), and against the examples
// of docs/api.md (each curl call and its answer, validated with a JSON
// Schema 2020-12 validator). They need no root and no daemon.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	iofs "io/fs"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"warren/api"
	"warren/gateway/files"
	"warren/meta"
)

const (
	openAPIFile = "../docs/openapi.yaml"
	apiDocFile  = "../docs/api.md"
	// openAPIURL is the spec's URL as a schema resource: $refs in it
	// ("#/components/schemas/X") resolve against it.
	openAPIURL = "file:///docs/openapi.yaml"
)

// wire is what one route takes and answers, in Go types.
type wire struct {
	req    reflect.Type // the JSON body the handler decodes; nil: none
	rawReq bool         // the body is bytes (application/octet-stream)
	resp   reflect.Type // the 200 body; for a stream, one line of it; nil: bytes
	stream bool         // the 200 body is NDJSON, lines of resp
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// wireTypes is the explicit table from route to Go types. The handlers
// are read to check it (TestOpenAPIHandlers), so it cannot drift from
// them; the spec is held against it (TestOpenAPISchemas).
var wireTypes = map[string]wire{
	// Threads and hosts.
	"POST /v1/tenants/{tenant}/threads/{thread}/bind":    {req: typeOf[api.BindRequest](), resp: typeOf[api.BindResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}":          {resp: typeOf[api.ThreadResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/network": {req: typeOf[meta.Egress](), resp: typeOf[api.BindResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/close":   {req: typeOf[struct{}](), resp: typeOf[api.ThreadResponse]()},
	"DELETE /v1/tenants/{tenant}/threads/{thread}":       {resp: typeOf[api.DeleteResponse]()},
	"GET /v1/threads":      {resp: typeOf[api.ThreadsResponse]()},
	"GET /v1/images":       {resp: typeOf[api.ImagesResponse]()},
	"POST /v1/images/pull": {req: typeOf[api.PullRequest](), resp: typeOf[api.ImageResponse]()},
	"POST /v1/images/load": {req: typeOf[api.LoadRequest](), resp: typeOf[api.ImageResponse]()},
	"DELETE /v1/images":    {resp: typeOf[api.RemoveImageResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/unpin": {req: typeOf[struct{}](), resp: typeOf[api.ThreadResponse]()},
	"GET /v1/hosts": {resp: typeOf[api.HostsResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/usage": {resp: typeOf[api.UsageResponse]()},

	// The operational endpoints.
	"GET /healthz":    {resp: typeOf[api.Health]()},
	"GET /v1/version": {resp: typeOf[api.Version]()},
	"GET /readyz":     {resp: typeOf[api.Readiness]()},
	"GET /metrics":    {},

	// Inspection mounts and events.
	"POST /v1/mounts":   {req: typeOf[api.MountRequest](), resp: typeOf[api.MountResponse]()},
	"GET /v1/mounts":    {resp: typeOf[api.MountsResponse]()},
	"DELETE /v1/mounts": {resp: typeOf[api.UnmountResponse]()},
	"GET /v1/events":    {resp: typeOf[api.Event](), stream: true},

	// The file API, raw content and runs.
	"POST /v1/tenants/{tenant}/threads/{thread}/files/read":   {req: typeOf[api.ReadFileRequest](), resp: typeOf[api.ReadFileResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/write":  {req: typeOf[api.WriteFileRequest](), resp: typeOf[api.WriteFileResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/edit":   {req: typeOf[api.EditFileRequest](), resp: typeOf[api.EditFileResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/list":   {req: typeOf[api.ListRequest](), resp: typeOf[api.ListResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/stat":   {req: typeOf[api.StatRequest](), resp: typeOf[api.StatResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/exists": {req: typeOf[api.ExistsRequest](), resp: typeOf[api.ExistsResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/mkdir":  {req: typeOf[api.MkdirRequest](), resp: typeOf[api.MkdirResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/remove": {req: typeOf[api.RemoveRequest](), resp: typeOf[api.RemoveResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/files/rename": {req: typeOf[api.RenameRequest](), resp: typeOf[api.RenameResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/files/raw":     {},
	"PUT /v1/tenants/{tenant}/threads/{thread}/files/raw":     {rawReq: true, resp: typeOf[api.RawInfo]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/runs":         {req: typeOf[api.RunRequest](), resp: typeOf[api.RunResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/runs/end":     {req: typeOf[api.RunRequest](), resp: typeOf[api.RunResponse]()},

	// Commands and jobs.
	"POST /v1/tenants/{tenant}/threads/{thread}/exec":                   {req: typeOf[api.ExecRequest](), resp: typeOf[api.ExecFrame](), stream: true},
	"POST /v1/tenants/{tenant}/threads/{thread}/exec/{exec}/stdin":      {req: typeOf[api.ExecStdinRequest](), resp: typeOf[api.ExecAck]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/exec/{exec}/resize":     {req: typeOf[api.ExecResizeRequest](), resp: typeOf[api.ExecAck]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/exec/{exec}/background": {req: typeOf[api.BackgroundRequest](), resp: typeOf[api.JobResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/exec/{exec}/signal":     {req: typeOf[api.SignalRequest](), resp: typeOf[api.SignalExecResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/jobs":                   {req: typeOf[api.SpawnRequest](), resp: typeOf[api.JobResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/jobs":                    {resp: typeOf[api.JobsResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/jobs/{job}":              {resp: typeOf[api.JobResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/jobs/{job}/output":       {resp: typeOf[api.JobFrame](), stream: true},
	"POST /v1/tenants/{tenant}/threads/{thread}/jobs/{job}/stop":        {req: typeOf[api.StopJobRequest](), resp: typeOf[api.JobResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/jobs/{job}/stdin":       {req: typeOf[api.ExecStdinRequest](), resp: typeOf[api.JobResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/jobs/{job}/signal":      {req: typeOf[api.SignalRequest](), resp: typeOf[api.SignalJobResponse]()},

	// Ports.
	"POST /v1/tenants/{tenant}/threads/{thread}/ports/{port}":   {req: typeOf[struct{}](), resp: typeOf[api.PortChannel]()},
	"DELETE /v1/tenants/{tenant}/threads/{thread}/ports/{port}": {resp: typeOf[api.PortClosed]()},

	// Checkpoints.
	"POST /v1/tenants/{tenant}/threads/{thread}/checkpoints": {req: typeOf[api.CheckpointRequest](), resp: typeOf[api.CheckpointResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/checkpoints":  {resp: typeOf[api.CheckpointsResponse]()},
	"GET /v1/tenants/{tenant}/threads/{thread}/diff":         {resp: typeOf[api.DiffResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/undo":        {req: typeOf[api.RestoreRequest](), resp: typeOf[api.RestoreResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/redo":        {req: typeOf[api.RestoreRequest](), resp: typeOf[api.RestoreResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/revert":      {req: typeOf[api.RestoreRequest](), resp: typeOf[api.RestoreResponse]()},
	"POST /v1/tenants/{tenant}/threads/{thread}/fork":        {req: typeOf[api.ForkRequest](), resp: typeOf[api.ForkResponse]()},
}

// streamFrames maps the streamers the handlers answer to the Go type of
// one line of what they write (nil: bytes).
var streamFrames = map[string]reflect.Type{
	"*eventStream":     typeOf[api.Event](),
	"*execStream":      typeOf[api.ExecFrame](),
	"*jobOutputStream": typeOf[api.JobFrame](),
	"*rawStream":       nil,
}

// ownStatusAnswers are the streamers that answer one JSON value with a
// status of their own (200 or 503): the Go type of that value.
var ownStatusAnswers = map[string]reflect.Type{
	"readyAnswer": typeOf[api.Readiness](),
}

// upgrades are the routes that answer an HTTP upgrade too, with a
// streamer of this type: it answers 101 and is no 200 answer.
var upgrades = map[string]string{
	"POST /v1/tenants/{tenant}/threads/{thread}/ports/{port}": "call.Streamer",
}

// textAnswers are the streamers that answer text (text/plain).
var textAnswers = map[string]bool{
	"metricsAnswer": true,
}

// ---- the spec ----

// openAPI is docs/openapi.yaml, as JSON values and as a schema resource.
type openAPI struct {
	doc      map[string]any
	ops      []*specOp
	c        *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema // by JSON pointer
}

// specOp is one operation of the spec.
type specOp struct {
	method, path string   // "POST", "/v1/tenants/{tenant}/..."
	segs         []string // the path's segments
	ptr          string   // JSON pointer of the operation object
	node         map[string]any
}

func (o *specOp) key() string { return o.method + " " + o.path }

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// loadOpenAPI reads and parses the spec. It fails the test if the
// document is not YAML or its schemas do not compile.
func loadOpenAPI(t testing.TB) *openAPI {
	t.Helper()
	b, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatalf("read the spec: %v", err)
	}
	var y any
	if err := yaml.Unmarshal(b, &y); err != nil {
		t.Fatalf("parse %s: %v", openAPIFile, err)
	}
	// Through JSON, so that numbers are json.Number as the validator
	// takes them and every map has string keys.
	j, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("%s as JSON: %v", openAPIFile, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatalf("%s as JSON: %v", openAPIFile, err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is not a mapping", openAPIFile)
	}
	if got, _ := doc["openapi"].(string); !strings.HasPrefix(got, "3.1.") {
		t.Fatalf("openapi: %q, want 3.1.x", got)
	}
	s := &openAPI{doc: doc, compiled: map[string]*jsonschema.Schema{}}
	s.c = jsonschema.NewCompiler()
	s.c.DefaultDraft(jsonschema.Draft2020)
	s.c.AssertFormat()
	for _, f := range intFormats {
		s.c.RegisterFormat(f)
	}
	if err := s.c.AddResource(openAPIURL, doc); err != nil {
		t.Fatalf("add the spec as a schema resource: %v", err)
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range sortedKeys(paths) {
		item, _ := paths[p].(map[string]any)
		for _, m := range httpMethods {
			node, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			s.ops = append(s.ops, &specOp{
				method: strings.ToUpper(m), path: p, segs: strings.Split(strings.TrimPrefix(p, "/"), "/"),
				ptr: "#/paths/" + escapePointer(p) + "/" + m, node: node,
			})
		}
	}
	// Every schema of components compiles, and every body's of every
	// operation (a $ref that leads nowhere fails here).
	schemas, _ := s.node("#/components/schemas").(map[string]any)
	for _, name := range sortedKeys(schemas) {
		if _, err := s.schema("#/components/schemas/" + name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
	for _, op := range s.ops {
		responses, _ := s.node(op.ptr + "/responses").(map[string]any)
		for _, status := range append([]string{""}, sortedKeys(responses)...) {
			for _, media := range s.mediaTypes(op, status) {
				if _, err := s.schema(s.mediaSchema(op, status, media)); err != nil {
					t.Errorf("%s: %s %s schema: %v", op.key(), cmpOr(status, "request"), media, err)
				}
			}
		}
	}
	return s
}

// intFormats check the ranges of the integer formats the spec uses (the
// validator knows none of them).
var intFormats = func() []*jsonschema.Format {
	var fs []*jsonschema.Format
	for _, f := range []struct {
		name     string
		unsigned bool
		bits     int
	}{{"int32", false, 32}, {"int64", false, 64}, {"uint16", true, 16}, {"uint32", true, 32}, {"uint64", true, 64}} {
		fs = append(fs, &jsonschema.Format{Name: f.name, Validate: func(v any) error {
			n, ok := v.(json.Number)
			if !ok {
				return nil
			}
			var err error
			if f.unsigned {
				_, err = strconv.ParseUint(string(n), 10, f.bits)
			} else {
				_, err = strconv.ParseInt(string(n), 10, f.bits)
			}
			if err != nil {
				return fmt.Errorf("%s is not an %s", n, f.name)
			}
			return nil
		}})
	}
	return fs
}()

// schema compiles the schema at a JSON pointer of the spec.
func (s *openAPI) schema(ptr string) (*jsonschema.Schema, error) {
	if sch, ok := s.compiled[ptr]; ok {
		return sch, nil
	}
	sch, err := s.c.Compile(openAPIURL + ptr)
	if err != nil {
		return nil, err
	}
	s.compiled[ptr] = sch
	return sch, nil
}

// node is the value at a JSON pointer ("#/a/b") of the spec, or nil.
func (s *openAPI) node(ptr string) any {
	var v any = s.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "#/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// mediaSchema is the pointer of an operation's request body schema
// (status "") or of one response's, for a media type; "" if none.
func (s *openAPI) mediaSchema(op *specOp, status, media string) string {
	base := op.ptr + "/requestBody"
	if status != "" {
		base = op.ptr + "/responses/" + status
		if r, ok := s.node(base + "/$ref").(string); ok {
			base = r
		}
	}
	ptr := base + "/content/" + escapePointer(media) + "/schema"
	if s.node(ptr) == nil {
		return ""
	}
	return ptr
}

// mediaTypes lists the media types of an operation's request body
// (status "") or of one of its responses.
func (s *openAPI) mediaTypes(op *specOp, status string) []string {
	base := op.ptr + "/requestBody"
	if status != "" {
		base = op.ptr + "/responses/" + status
		if r, ok := s.node(base + "/$ref").(string); ok {
			base = r
		}
	}
	content, _ := s.node(base + "/content").(map[string]any)
	return sortedKeys(content)
}

// queryParams are an operation's query parameters (its own and its
// path's), by name, each with whether it is required.
func (s *openAPI) queryParams(op *specOp) map[string]bool {
	out := map[string]bool{}
	pathPtr := op.ptr[:strings.LastIndex(op.ptr, "/")]
	for _, base := range []string{pathPtr, op.ptr} {
		list, _ := s.node(base + "/parameters").([]any)
		for i := range list {
			p := s.param(fmt.Sprintf("%s/parameters/%d", base, i))
			if p["in"] == "query" {
				out[p["name"].(string)] = p["required"] == true
			}
		}
	}
	return out
}

// pathParams are the names of the path parameters an operation declares.
func (s *openAPI) pathParams(op *specOp) []string {
	var out []string
	pathPtr := op.ptr[:strings.LastIndex(op.ptr, "/")]
	for _, base := range []string{pathPtr, op.ptr} {
		list, _ := s.node(base + "/parameters").([]any)
		for i := range list {
			p := s.param(fmt.Sprintf("%s/parameters/%d", base, i))
			if p["in"] == "path" {
				out = append(out, p["name"].(string))
			}
		}
	}
	slices.Sort(out)
	return out
}

func (s *openAPI) param(ptr string) map[string]any {
	p, _ := s.node(ptr).(map[string]any)
	if r, ok := p["$ref"].(string); ok {
		p, _ = s.node(r).(map[string]any)
	}
	return p
}

// find returns the operation a request goes to, matching its escaped
// path segment by segment as the router does, or nil.
func (s *openAPI) find(method, escapedPath string) *specOp {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	for _, op := range s.ops {
		if op.method != method || len(op.segs) != len(segs) {
			continue
		}
		ok := true
		for i, ps := range op.segs {
			if !strings.HasPrefix(ps, "{") && ps != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return op
		}
	}
	return nil
}

// schemaView is a schema of the spec seen through its $ref and allOf:
// everything the validator combines when it checks an object.
type schemaView struct {
	ref      string            // the component a $ref on the node names
	bases    []string          // the components of its own allOf (not of theirs)
	types    []string          // "object", "string"...
	format   string            // "int64", "date-time"...
	props    map[string]string // property → pointer of its schema
	required map[string]bool
	items    string // pointer of the items schema
	addl     string // pointer of the additionalProperties schema
	closed   bool   // additionalProperties or unevaluatedProperties false
}

// view gathers the schema at ptr.
func (s *openAPI) view(ptr string) *schemaView {
	v := &schemaView{props: map[string]string{}, required: map[string]bool{}}
	if r, ok := s.node(ptr + "/$ref").(string); ok {
		v.ref = strings.TrimPrefix(r, "#/components/schemas/")
	} else if name, ok := strings.CutPrefix(ptr, "#/components/schemas/"); ok && !strings.Contains(name, "/") {
		v.ref = name
	}
	s.gather(ptr, v, true, 0)
	return v
}

func (s *openAPI) gather(ptr string, v *schemaView, top bool, depth int) {
	n, ok := s.node(ptr).(map[string]any)
	if !ok || depth > 16 {
		return
	}
	switch t := n["type"].(type) {
	case string:
		v.types = appendNew(v.types, t)
	case []any:
		for _, x := range t {
			v.types = appendNew(v.types, x.(string))
		}
	}
	if f, ok := n["format"].(string); ok && v.format == "" {
		v.format = f
	}
	// What a $ref or an allOf brings first: a property's schema is the
	// component's, and a sibling of the $ref at a use (a narrowing, as
	// undo's "checkpoint": "") only adds to it; the validator checks both.
	if r, ok := n["$ref"].(string); ok {
		s.gather(r, v, top, depth+1)
	}
	if all, ok := n["allOf"].([]any); ok {
		for i := range all {
			sub := fmt.Sprintf("%s/allOf/%d", ptr, i)
			if r, ok := s.node(sub + "/$ref").(string); ok && top {
				v.bases = append(v.bases, strings.TrimPrefix(r, "#/components/schemas/"))
			}
			s.gather(sub, v, false, depth+1)
		}
	}
	if ps, ok := n["properties"].(map[string]any); ok {
		for name := range ps {
			if _, seen := v.props[name]; !seen {
				v.props[name] = ptr + "/properties/" + escapePointer(name)
			}
		}
	}
	if rs, ok := n["required"].([]any); ok {
		for _, r := range rs {
			v.required[r.(string)] = true
		}
	}
	if _, ok := n["items"]; ok && v.items == "" {
		v.items = ptr + "/items"
	}
	switch a := n["additionalProperties"].(type) {
	case bool:
		if top && !a {
			v.closed = true
		}
	case map[string]any:
		if v.addl == "" {
			v.addl = ptr + "/additionalProperties"
		}
	}
	if u, ok := n["unevaluatedProperties"].(bool); ok && top && !u {
		v.closed = true
	}
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ---- the Go types ----

// goField is one JSON field of a Go struct, as encoding/json sees it.
type goField struct {
	name     string
	typ      reflect.Type
	optional bool // omitempty or omitzero: not always in an answer
	depth    int
}

// goFields lists the JSON fields of a struct, its embedded structs'
// fields flattened into it; of two fields of one name, the shallower
// wins, as in encoding/json.
func goFields(t reflect.Type) []goField {
	var out []goField
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft, depth+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			opt := false
			for o := range strings.SplitSeq(opts, ",") {
				opt = opt || o == "omitempty" || o == "omitzero"
			}
			nf := goField{name: name, typ: f.Type, optional: opt, depth: depth}
			if j := slices.IndexFunc(out, func(g goField) bool { return g.name == name }); j >= 0 {
				if out[j].depth > depth {
					out[j] = nf
				}
				continue
			}
			out = append(out, nf)
		}
	}
	walk(t, 0)
	return out
}

// embedded lists the names of the structs a struct embeds.
func embedded(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("json") == "" {
			out = append(out, f.Type.Name())
		}
	}
	slices.Sort(out)
	return out
}

var (
	timeType        = typeOf[time.Time]()
	unmarshalerType = typeOf[json.Unmarshaler]()
)

// checkGo holds the schema at ptr against Go type typ: same fields at
// every depth (names, JSON types, formats), named after the Go types,
// closed, and for an answer (resp) the same required fields as the Go
// fields always sent.
func (s *openAPI) checkGo(t *testing.T, where, ptr string, typ reflect.Type, resp bool) {
	t.Helper()
	v := s.view(ptr)
	if len(v.types) == 0 && v.ref == "" && len(v.props) == 0 {
		t.Errorf("%s (%s): no schema", where, ptr)
		return
	}
	wantType := func(want, format string) {
		t.Helper()
		if !slices.Contains(v.types, want) {
			t.Errorf("%s: type %v, want %s (Go %s)", where, v.types, want, typ)
		}
		if format != "" && v.format != format {
			t.Errorf("%s: format %q, want %q (Go %s)", where, v.format, format, typ)
		}
	}
	if reflect.PointerTo(typ).Implements(unmarshalerType) && typ != timeType {
		return // decoded its own way (api.Signal: a string or a number)
	}
	switch typ.Kind() {
	case reflect.Pointer:
		s.checkGo(t, where, ptr, typ.Elem(), resp)
	case reflect.Struct:
		if typ == timeType {
			wantType("string", "date-time")
			return
		}
		wantType("object", "")
		if typ.Name() != "" && v.ref != typ.Name() {
			t.Errorf("%s: schema %q, want a $ref to the component named after Go type %s", where, v.ref, typ)
		}
		bases := slices.Sorted(slices.Values(v.bases))
		if emb := embedded(typ); !slices.Equal(bases, emb) {
			t.Errorf("%s: allOf of %v, want %v as Go %s embeds them", where, bases, emb, typ)
		}
		if !v.closed {
			t.Errorf("%s: not closed (additionalProperties or unevaluatedProperties false), as %s", where,
				map[bool]string{true: "an answer of this daemon is exact", false: "the daemon refuses unknown fields"}[resp])
		}
		fields := goFields(typ)
		names := map[string]bool{}
		for _, f := range fields {
			names[f.name] = true
			fp, ok := v.props[f.name]
			if !ok {
				t.Errorf("%s: Go %s has the field %q, the spec does not", where, typ, f.name)
				continue
			}
			s.checkGo(t, where+"."+f.name, fp, f.typ, resp)
			if resp && v.required[f.name] == f.optional {
				t.Errorf("%s: %q required: %v, but Go %s always sends it: %v", where, f.name, v.required[f.name], typ, !f.optional)
			}
		}
		for _, p := range sortedKeys(v.props) {
			if !names[p] {
				t.Errorf("%s: the spec has the field %q, Go %s does not", where, p, typ)
			}
		}
		for _, r := range sortedKeys(v.required) {
			if !names[r] {
				t.Errorf("%s: %q is required but Go %s has no such field", where, r, typ)
			}
		}
	case reflect.Slice, reflect.Array:
		wantType("array", "")
		if v.items == "" {
			t.Errorf("%s: an array without items", where)
			return
		}
		s.checkGo(t, where+"[]", v.items, typ.Elem(), resp)
	case reflect.Map:
		wantType("object", "")
		if v.addl == "" {
			t.Errorf("%s: a map without an additionalProperties schema", where)
			return
		}
		s.checkGo(t, where+"{}", v.addl, typ.Elem(), resp)
	case reflect.String:
		wantType("string", "")
	case reflect.Bool:
		wantType("boolean", "")
	case reflect.Int, reflect.Int64:
		wantType("integer", "int64")
	case reflect.Int32:
		wantType("integer", "int32")
	case reflect.Uint64:
		wantType("integer", "uint64")
	case reflect.Uint32:
		wantType("integer", "uint32")
	case reflect.Uint16:
		wantType("integer", "uint16")
	case reflect.Float64:
		wantType("number", "double")
	default:
		t.Errorf("%s: Go %s has no JSON type in this test", where, typ)
	}
}

// ---- the handlers, as source ----

// handlerFacts is what a handler's source says it takes and answers.
type handlerFacts struct {
	reqType  string // "api.X", "struct{}", "" for no decodeBody
	emptyOK  bool   // decodeBody's emptyOK
	query    []string
	queryFn  string // a helper that reads the query ("RawQuery"), with its bool argument
	queryArg bool
	answers  []string // the types its non-error returns have ("api.X", "*eventStream")
	// progress: it answers through call.WithProgress, which takes the
	// query parameter progress and answers api.ProgressFrame lines when
	// asked; the func it runs is the handler's own code.
	progress bool
}

// gatewaySource is the daemon's source: package gateway and its rooms
// (gateway/<room>), whose handlers the route table calls.
type gatewaySource struct {
	funcs   map[string]*ast.FuncDecl   // functions by "pkg.Name"
	methods map[string]*ast.FuncDecl   // methods by "pkg.Recv.Name"
	named   map[string][]*ast.FuncDecl // methods by "pkg.Name", of any receiver
}

func parseGatewaySource(t testing.TB) *gatewaySource {
	t.Helper()
	fset := token.NewFileSet()
	src := &gatewaySource{funcs: map[string]*ast.FuncDecl{}, methods: map[string]*ast.FuncDecl{}, named: map[string][]*ast.FuncDecl{}}
	err := filepath.WalkDir(".", func(path string, d iofs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		pkg := "gateway"
		if dir := filepath.Dir(path); dir != "." {
			pkg = filepath.Base(dir)
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fd.Recv == nil {
				src.funcs[pkg+"."+fd.Name.Name] = fd
				continue
			}
			recv := fd.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			src.methods[pkg+"."+exprString(recv)+"."+fd.Name.Name] = fd
			src.named[pkg+"."+fd.Name.Name] = append(src.named[pkg+"."+fd.Name.Name], fd)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.StructType:
		if len(x.Fields.List) == 0 {
			return "struct{}"
		}
	}
	return fmt.Sprintf("%T", e)
}

// facts reads a handler.
func (src *gatewaySource) facts(pkg string, fd *ast.FuncDecl) handlerFacts {
	var hf handlerFacts
	vars := map[string]string{} // var req api.X
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if ds, ok := n.(*ast.DeclStmt); ok {
			if gd, ok := ds.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok && vs.Type != nil {
						for _, id := range vs.Names {
							vars[id.Name] = exprString(vs.Type)
						}
					}
				}
			}
		}
		return true
	})
	progressFunc := map[*ast.FuncLit]bool{}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && exprString(c.Fun) == "call.WithProgress" && len(c.Args) == 2 {
			if fl, ok := c.Args[1].(*ast.FuncLit); ok {
				progressFunc[fl] = true
			}
		}
		return true
	})
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CallExpr:
			var fn *ast.Ident
			switch f := x.Fun.(type) {
			case *ast.Ident:
				fn = f
			case *ast.SelectorExpr:
				if exprString(f.X) != "call" {
					return true
				}
				fn = f.Sel
			default:
				return true
			}
			switch fn.Name {
			case "DecodeBody":
				if u, ok := x.Args[1].(*ast.UnaryExpr); ok {
					switch arg := u.X.(type) {
					case *ast.Ident:
						hf.reqType = vars[arg.Name]
					case *ast.CompositeLit:
						hf.reqType = exprString(arg.Type)
					}
				}
				hf.emptyOK = exprString(x.Args[2]) == "true"
			case "Query":
				for _, a := range x.Args[1:] {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						k, _ := strconv.Unquote(lit.Value)
						hf.query = append(hf.query, k)
					}
				}
			case "NoQuery":
			case "WithProgress":
				hf.progress = true
				hf.query = append(hf.query, "progress")
			default:
				if len(x.Args) == 2 && exprString(x.Args[0]) == "r" {
					if b := exprString(x.Args[1]); b == "true" || b == "false" {
						hf.queryFn, hf.queryArg = fn.Name, b == "true"
					}
				}
			}
		case *ast.ReturnStmt:
			switch {
			case len(x.Results) == 2 && exprString(x.Results[0]) != "nil":
				hf.answers = appendNew(hf.answers, src.typeOfExpr(pkg, x.Results[0]))
			case len(x.Results) == 1:
				// return g.checkpoint(...): the method's first result.
				if c, ok := x.Results[0].(*ast.CallExpr); ok && exprString(c.Fun) != "call.WithProgress" {
					hf.answers = appendNew(hf.answers, src.typeOfExpr(pkg, x.Results[0]))
				}
			}
		case *ast.FuncLit:
			// Its returns are not the handler's, but those of the func
			// call.WithProgress runs are.
			return progressFunc[x]
		}
		return true
	})
	slices.Sort(hf.query)
	return hf
}

// typeOfExpr names the type of a handler's answer: a composite literal's,
// or the first result of the method or function of package pkg it calls.
func (src *gatewaySource) typeOfExpr(pkg string, e ast.Expr) string {
	switch x := e.(type) {
	case *ast.CompositeLit:
		return exprString(x.Type)
	case *ast.UnaryExpr:
		if cl, ok := x.X.(*ast.CompositeLit); ok && x.Op == token.AND {
			return "*" + exprString(cl.Type)
		}
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
			for _, fd := range src.named[pkg+"."+sel.Sel.Name] {
				if fd.Type.Results != nil {
					return exprString(fd.Type.Results.List[0].Type)
				}
			}
		}
		// return f(...), nil: a function of the package's.
		if id, ok := x.Fun.(*ast.Ident); ok {
			if fd := src.funcs[pkg+"."+id.Name]; fd != nil && fd.Type.Results != nil {
				return exprString(fd.Type.Results.List[0].Type)
			}
		}
	}
	return fmt.Sprintf("(%T)", e)
}

// handlerName is the package (gateway, or a room's) and the name of a
// route's handler: "pkg.Recv.Method" for a method, "pkg.Func" for a
// function.
func handlerName(r route) (pkg, name string) {
	full := strings.TrimSuffix(runtime.FuncForPC(reflect.ValueOf(r.handle).Pointer()).Name(), "-fm")
	full = strings.TrimPrefix(full, "warren/")
	full = full[strings.LastIndex(full, "/")+1:] // gateway.(*T).M or room.(*T).M
	full = strings.NewReplacer("(*", "", ")", "").Replace(full)
	return full[:strings.Index(full, ".")], full
}

// ---- the tests ----

// TestOpenAPIRoutes: every route of routes() is an operation of the spec
// with the same method and path, and every operation of the spec is a
// route; each declares its path parameters.
func TestOpenAPIRoutes(t *testing.T) {
	s := loadOpenAPI(t)
	served := map[string]bool{}
	for _, r := range routes(handlers{}) {
		served[r.method+" "+r.pattern] = true
	}
	inSpec := map[string]*specOp{}
	for _, op := range s.ops {
		inSpec[op.key()] = op
	}
	for _, k := range sortedKeys(served) {
		if inSpec[k] == nil {
			t.Errorf("route %s is served but not in %s", k, openAPIFile)
		}
	}
	for _, k := range sortedKeys(inSpec) {
		if !served[k] {
			t.Errorf("%s documents %s, which routes() does not serve", openAPIFile, k)
		}
	}
	for _, op := range s.ops {
		var want []string
		for _, seg := range op.segs {
			if strings.HasPrefix(seg, "{") {
				want = append(want, strings.Trim(seg, "{}"))
			}
		}
		slices.Sort(want)
		if got := s.pathParams(op); !slices.Equal(got, want) {
			t.Errorf("%s: path parameters %v, want %v", op.key(), got, want)
		}
	}
	// The test's own table covers the routes, no more.
	for _, k := range sortedKeys(served) {
		if _, ok := wireTypes[k]; !ok {
			t.Errorf("route %s is not in this test's wireTypes", k)
		}
	}
	for _, k := range sortedKeys(wireTypes) {
		if !served[k] {
			t.Errorf("wireTypes lists %s, which routes() does not serve", k)
		}
	}
}

// TestOpenAPIHandlers reads each handler's source: the body type it
// decodes and whether the body is optional, the query parameters it
// takes, and the type it answers must be what wireTypes and the spec
// say.
func TestOpenAPIHandlers(t *testing.T) {
	s := loadOpenAPI(t)
	src := parseGatewaySource(t)
	for _, r := range routes(handlers{}) {
		key := r.method + " " + r.pattern
		w, inTable := wireTypes[key]
		op := s.find(r.method, r.pattern)
		if !inTable || op == nil || op.key() != key {
			continue // TestOpenAPIRoutes says so
		}
		t.Run(key, func(t *testing.T) {
			pkg, name := handlerName(r)
			fd := src.methods[name]
			if fd == nil {
				fd = src.funcs[name] // a handler that needs no receiver
			}
			if fd == nil {
				t.Fatalf("no source for handler %s", name)
			}
			hf := src.facts(pkg, fd)

			// The body.
			wantReq := ""
			if w.req != nil {
				wantReq = w.req.String()
			}
			if wantReq == "struct {}" {
				wantReq = "struct{}"
			}
			if hf.reqType != wantReq {
				t.Errorf("%s decodes %q, wireTypes says %q", name, hf.reqType, wantReq)
			}
			reqMedia := s.mediaTypes(op, "")
			switch {
			case w.req != nil:
				if !slices.Equal(reqMedia, []string{"application/json"}) {
					t.Errorf("request body media types %v, want application/json", reqMedia)
				}
				if got := s.node(op.ptr+"/requestBody/required") == true; got != !hf.emptyOK {
					t.Errorf("requestBody.required is %v, but %s takes an empty body: %v", got, name, hf.emptyOK)
				}
			case w.rawReq:
				if !slices.Equal(reqMedia, []string{"application/octet-stream"}) {
					t.Errorf("request body media types %v, want application/octet-stream", reqMedia)
				}
			default:
				if s.node(op.ptr+"/requestBody") != nil {
					t.Errorf("the spec has a request body, %s reads none", name)
				}
			}

			// The query.
			var spec []string
			for _, k := range sortedKeys(s.queryParams(op)) {
				spec = append(spec, k)
			}
			got := hf.query
			if hf.queryFn != "" {
				got = acceptedQuery(t, hf.queryFn, hf.queryArg, append(slices.Clone(spec), "path", "run", "mode", "x"))
			}
			if !slices.Equal(got, spec) {
				t.Errorf("%s takes the query parameters %v, the spec lists %v", name, got, spec)
			}

			// The answer.
			if u, ok := upgrades[key]; ok {
				if !slices.Contains(hf.answers, u) || s.node(op.ptr+"/responses/101") == nil {
					t.Errorf("%s answers %v; want an upgrade (%s), which the spec answers 101", name, hf.answers, u)
				}
				hf.answers = slices.DeleteFunc(hf.answers, func(a string) bool { return a == u })
			}
			if len(hf.answers) != 1 {
				t.Fatalf("%s answers %v; this test knows one type per handler", name, hf.answers)
			}
			answer := hf.answers[0]
			media := s.mediaTypes(op, "200")
			if textAnswers[answer] {
				if w.resp != nil || !slices.Equal(media, []string{"text/plain"}) {
					t.Errorf("%s answers text: wireTypes says %v, the spec %v", name, w.resp, media)
				}
				return
			}
			if v, ok := ownStatusAnswers[answer]; ok {
				answer = v.String()
			}
			if frame, ok := streamFrames[answer]; ok {
				if frame != w.resp || (frame != nil) != w.stream {
					t.Errorf("%s answers %s (lines of %v), wireTypes says %v (stream %v)", name, answer, frame, w.resp, w.stream)
				}
				want := "application/x-ndjson"
				if frame == nil {
					want = "application/octet-stream"
				}
				if !slices.Equal(media, []string{want}) {
					t.Errorf("200 media types %v, want %s", media, want)
				}
				return
			}
			if w.resp == nil || w.stream || answer != w.resp.String() {
				t.Errorf("%s answers %s, wireTypes says %v (stream %v)", name, answer, w.resp, w.stream)
			}
			want := []string{"application/json"}
			if hf.progress {
				want = append(want, "application/x-ndjson")
			}
			if !slices.Equal(media, want) {
				t.Errorf("200 media types %v, want %v", media, want)
			}
			if hf.progress {
				if v := s.view(s.mediaSchema(op, "200", "application/x-ndjson")); v.ref != "ProgressFrame" {
					t.Errorf("the progress stream's schema %q, want ProgressFrame", v.ref)
				}
			}
		})
	}
}

// acceptedQuery asks a query-reading helper which of the keys it takes,
// one at a time, each with a value it accepts.
func acceptedQuery(t *testing.T, fn string, arg bool, keys []string) []string {
	t.Helper()
	var parse func(q string) error
	switch fn {
	case "RawQuery":
		parse = func(q string) error {
			_, err := files.RawQuery(httptest.NewRequest("GET", "/x?"+q, nil), arg)
			return err
		}
	default:
		t.Fatalf("the handler reads its query with %s, which this test does not know", fn)
	}
	values := map[string]string{"mode": "0644"}
	var out []string
	for _, k := range keys {
		if slices.Contains(out, k) {
			continue
		}
		q := url.Values{"path": {"a"}}
		q.Set(k, cmpOr(values[k], "a"))
		err := parse(q.Encode())
		if err == nil {
			out = append(out, k)
		} else if !strings.Contains(err.Error(), "unknown query parameter") {
			t.Errorf("%s with %s: %v", fn, q.Encode(), err)
		}
	}
	slices.Sort(out)
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestOpenAPISchemas holds each operation's request and 200 schemas, and
// the error body's, against the Go types, field by field at every depth.
func TestOpenAPISchemas(t *testing.T) {
	s := loadOpenAPI(t)
	for _, op := range s.ops {
		w, ok := wireTypes[op.key()]
		if !ok {
			continue // TestOpenAPIRoutes says so
		}
		t.Run(op.key(), func(t *testing.T) {
			if w.req != nil {
				ptr := s.mediaSchema(op, "", "application/json")
				if ptr == "" {
					t.Errorf("no application/json request body schema")
				} else if w.req.Name() == "" {
					s.checkGo(t, "request", ptr, w.req, false)
				} else {
					s.checkGo(t, "request "+w.req.Name(), ptr, w.req, false)
				}
			}
			media := "application/json"
			if w.stream {
				media = "application/x-ndjson"
			}
			if w.resp != nil {
				ptr := s.mediaSchema(op, "200", media)
				if ptr == "" {
					t.Errorf("no %s 200 schema", media)
				} else {
					s.checkGo(t, "200 "+w.resp.Name(), ptr, w.resp, true)
				}
			}
			responses, _ := s.node(op.ptr + "/responses").(map[string]any)
			for _, status := range sortedKeys(responses) {
				if status == "200" || status == "101" && upgrades[op.key()] != "" {
					continue
				}
				if status == "503" && op.key() == "GET /readyz" {
					// Not ready: the same Readiness, its checks failing.
					if v := s.view(s.mediaSchema(op, status, "application/json")); v.ref != "Readiness" {
						t.Errorf("503: schema %q, want Readiness", v.ref)
					}
					continue
				}
				ptr := s.mediaSchema(op, status, "application/json")
				if ptr == "" {
					t.Errorf("%s: no application/json error schema", status)
					continue
				}
				if v := s.view(ptr); v.ref != "ErrorBody" {
					t.Errorf("%s: schema %q, want ErrorBody", status, v.ref)
				}
			}
			if s.node(op.ptr+"/responses/400") == nil {
				t.Errorf("no 400 answer: every call can be refused as invalid")
			}
		})
	}
	t.Run("ErrorBody", func(t *testing.T) {
		s.checkGo(t, "ErrorBody", "#/components/schemas/ErrorBody", typeOf[api.ErrorBody](), true)
	})
	// A progress stream's lines (ProgressFrame) are each one of these.
	t.Run("Progress", func(t *testing.T) {
		s.checkGo(t, "Progress", "#/components/schemas/Progress", typeOf[api.Progress](), true)
	})
	t.Run("ProgressEnd", func(t *testing.T) {
		s.checkGo(t, "ProgressEnd", "#/components/schemas/ProgressEnd", typeOf[api.ProgressEnd](), true)
	})
}

// TestOpenAPIEnums: the error codes of the spec are the Code constants of
// package api, and its event types the EventType constants, both ways.
func TestOpenAPIEnums(t *testing.T) {
	s := loadOpenAPI(t)
	codes, events := apiConstants(t)
	for _, c := range []struct {
		ptr  string
		want []string
	}{
		{"#/components/schemas/APIError/properties/code/enum", codes},
		{"#/components/schemas/EventType/enum", events},
	} {
		var got []string
		list, _ := s.node(c.ptr).([]any)
		for _, v := range list {
			got = append(got, v.(string))
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want (from package api) %v", c.ptr, got, c.want)
		}
	}
}

// apiConstants reads package api's source for its error codes (string
// constants named Code...) and event types (constants of type EventType).
func apiConstants(t testing.TB) (codes, events []string) {
	t.Helper()
	files, err := filepath.Glob("../api/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					switch {
					case vs.Type != nil && exprString(vs.Type) == "EventType":
						events = append(events, v)
					case strings.HasPrefix(id.Name, "Code"):
						codes = append(codes, v)
					}
				}
			}
		}
	}
	slices.Sort(codes)
	slices.Sort(events)
	if len(codes) == 0 || len(events) == 0 {
		t.Fatalf("found %d codes and %d event types in package api", len(codes), len(events))
	}
	return codes, events
}

// ---- the examples of docs/api.md ----

// docCall is one curl call of docs/api.md and the answer shown after it.
type docCall struct {
	line       int // of the command, 1-based
	method     string
	path       string // escaped, as sent
	query      url.Values
	body       []byte // -d
	hasBody    bool   // -d, --data-binary or -T
	rawBody    bool   // --data-binary or -T: bytes, not JSON
	headers    bool   // -i or -D -: the answer starts with the status and headers
	jq         string // the jq filter the answer went through, "" for none
	background bool   // the call runs on (&) while later ones are made
	answer     string
}

// docBlock is one fenced block of docs/api.md.
type docBlock struct {
	line  int
	calls []*docCall
	text  string // a block without a curl call: its content
}

var fenceRE = regexp.MustCompile("^(\\s*)```")

// docBlocks reads the fenced blocks of docs/api.md and the curl calls in
// them: a line "$ curl ..." (continued by trailing backslashes), then
// the lines up to the next "$ " line are its answer.
func docBlocks(t testing.TB) []docBlock {
	t.Helper()
	f, err := os.Open(apiDocFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []docBlock
	var cur *docBlock
	var indent string
	var lines []string
	var lineNos []int
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			if cur == nil {
				cur, indent, lines, lineNos = &docBlock{line: n}, m[1], nil, nil
				continue
			}
			blocks = append(blocks, parseBlock(t, *cur, lines, lineNos))
			cur = nil
			continue
		}
		if cur != nil {
			lines = append(lines, strings.TrimPrefix(l, indent))
			lineNos = append(lineNos, n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fenced block is not closed", apiDocFile, cur.line)
	}
	return blocks
}

func parseBlock(t testing.TB, b docBlock, lines []string, lineNos []int) docBlock {
	t.Helper()
	var call *docCall // the curl call whose answer the lines are
	var answer []string
	flush := func() {
		if call != nil {
			call.answer = strings.Join(answer, "\n")
			b.calls = append(b.calls, call)
		}
		call, answer = nil, nil
	}
	hasCommand := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "$ ") {
			answer = append(answer, l)
			continue
		}
		flush()
		hasCommand = true
		start := lineNos[i]
		cmd := strings.TrimPrefix(l, "$ ")
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[i])
		}
		c, err := parseCurl(cmd)
		if err != nil {
			t.Errorf("%s:%d: %v", apiDocFile, start, err)
			continue
		}
		if c != nil {
			c.line = start
			call = c
		} else {
			call, answer = nil, nil
			// Not curl (warren, mkdir): its output is not checked. Skip
			// it up to the next command.
			for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "$ ") {
				i++
			}
		}
	}
	flush()
	if !hasCommand {
		b.text = strings.Join(lines, "\n")
	}
	return b
}

// parseCurl reads a curl command line; nil if it is not curl.
func parseCurl(cmd string) (*docCall, error) {
	words, pipe, bg, err := shellWords(cmd)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 || words[0] != "curl" {
		return nil, nil
	}
	c := &docCall{background: bg}
	if pipe != "" {
		f := strings.Fields(pipe)
		if len(f) < 1 || f[0] != "jq" {
			return nil, fmt.Errorf("curl piped into %q, which this test does not read", pipe)
		}
		c.jq = "."
		if len(f) > 1 {
			c.jq = f[len(f)-1]
		}
	}
	var rawURL, socket string
	pathAsIs, upload := false, false
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("curl %s without its argument", w)
			}
			i++
			return words[i], nil
		}
		switch {
		case w == "--unix-socket":
			if socket, err = arg(); err != nil {
				return nil, err
			}
		case w == "-X" || w == "--request":
			if c.method, err = arg(); err != nil {
				return nil, err
			}
		case w == "-d" || w == "--data" || w == "--data-raw":
			b, err := arg()
			if err != nil {
				return nil, err
			}
			c.body, c.hasBody = []byte(b), true
		case w == "--data-binary":
			if _, err := arg(); err != nil {
				return nil, err
			}
			c.hasBody, c.rawBody = true, true
		case w == "-T" || w == "--upload-file":
			if _, err := arg(); err != nil {
				return nil, err
			}
			c.hasBody, c.rawBody, upload = true, true, true
		case w == "-H" || w == "--header" || w == "-o" || w == "--output":
			if _, err := arg(); err != nil {
				return nil, err
			}
		case w == "-D" || w == "--dump-header":
			to, err := arg()
			if err != nil {
				return nil, err
			}
			c.headers = c.headers || to == "-"
		case w == "--path-as-is":
			pathAsIs = true
		case w == "-i" || w == "--include":
			c.headers = true
		case strings.HasPrefix(w, "--"):
			// --no-buffer, --silent...: nothing to read.
		case strings.HasPrefix(w, "-"):
			if strings.Trim(w[1:], "sSNfLvi") != "" {
				return nil, fmt.Errorf("curl option %s is not known to this test", w)
			}
			c.headers = c.headers || strings.Contains(w, "i")
		case rawURL == "":
			rawURL = w
		default:
			return nil, fmt.Errorf("curl with a second URL %q", w)
		}
	}
	if socket == "" {
		return nil, fmt.Errorf("curl without --unix-socket")
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host != "warren" {
		return nil, fmt.Errorf("curl URL %q: want http://warren/...", rawURL)
	}
	c.path = u.EscapedPath()
	if !pathAsIs {
		c.path = removeDotSegments(c.path)
	}
	if c.query, err = url.ParseQuery(u.RawQuery); err != nil {
		return nil, fmt.Errorf("curl URL %q: %v", rawURL, err)
	}
	if c.method == "" {
		switch {
		case upload:
			c.method = "PUT"
		case c.hasBody:
			c.method = "POST"
		default:
			c.method = "GET"
		}
	}
	return c, nil
}

// removeDotSegments does to a path what curl does before it sends it
// (RFC 3986, 5.2.4) unless --path-as-is.
func removeDotSegments(p string) string {
	var out []string
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch s {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/")
}

// shellWords splits a command line as a shell would: quotes, backslash
// escapes, a comment, one pipe and a trailing &.
func shellWords(line string) (words []string, pipe string, bg bool, err error) {
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, "", false, fmt.Errorf("unclosed ' in %q", line)
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				w.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, "", false, fmt.Errorf("unclosed \" in %q", line)
			}
			inWord = true
		case ch == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case ch == ' ' || ch == '\t':
			end()
		case ch == '#' && !inWord:
			end()
			return words, pipe, bg, nil
		case ch == '|':
			end()
			rest := strings.TrimSpace(line[i+1:])
			rest, bg = strings.CutSuffix(rest, "&")
			return words, strings.TrimSpace(rest), bg, nil
		case ch == '&' && strings.TrimSpace(line[i+1:]) == "":
			end()
			return words, pipe, true, nil
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	end()
	return words, pipe, bg, nil
}

// answerValues splits an answer into its status (0 if not shown) and the
// JSON values it holds; raw is set when its body is not JSON.
func answerValues(c *docCall) (status int, values []any, raw bool, err error) {
	text := c.answer
	if c.headers {
		text = strings.TrimLeft(text, "\n")
		head, body, _ := strings.Cut(text, "\n\n")
		first, _, _ := strings.Cut(head, "\n")
		f := strings.Fields(first)
		if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
			return 0, nil, false, fmt.Errorf("the answer does not start with a status line: %q", first)
		}
		if status, err = strconv.Atoi(f[1]); err != nil {
			return 0, nil, false, fmt.Errorf("status line %q: %v", first, err)
		}
		text = body
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return status, values, false, nil
		}
		if err != nil {
			if len(values) == 0 {
				return status, nil, true, nil
			}
			return status, values, false, fmt.Errorf("the answer is not JSON lines: %v", err)
		}
		values = append(values, v)
	}
}

// isErrorBody says whether an answer is an error answer: an object whose
// "error" is an object (an exec frame's "error" is a string).
func isErrorBody(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m["error"].(map[string]any)
	return ok
}

var jqPathRE = regexp.MustCompile(`^(\.[A-Za-z_][A-Za-z0-9_]*)*$|^\.$`)

// answerSchema is the pointer of the schema a call's answer lines must
// fit: the 200 schema of op, narrowed by the jq filter it went through.
// skip says why there is none to check against.
func (s *openAPI) answerSchema(op *specOp, c *docCall) (ptr, skip string) {
	medias := []string{"application/json", "application/x-ndjson"}
	if c.query.Has("progress") { // a long call's progress stream
		medias = medias[1:]
	}
	for _, media := range medias {
		if p := s.mediaSchema(op, "200", media); p != "" {
			ptr = p
			break
		}
	}
	if ptr == "" {
		return "", "its 200 answer is bytes"
	}
	if c.jq == "" || c.jq == "." {
		return ptr, ""
	}
	if !jqPathRE.MatchString(c.jq) {
		return "", "jq " + c.jq
	}
	for _, name := range strings.Split(strings.TrimPrefix(c.jq, "."), ".") {
		p, ok := s.view(ptr).props[name]
		if !ok {
			return "", "" // reported by the caller as no schema
		}
		ptr = p
	}
	return ptr, ""
}

func (s *openAPI) validate(ptr string, v any) error {
	sch, err := s.schema(ptr)
	if err != nil {
		return fmt.Errorf("compile %s: %v", ptr, err)
	}
	return sch.Validate(v)
}

// TestOpenAPIDocExamples: every curl call in a fenced block of
// docs/api.md goes to an operation of the spec; its JSON body fits the
// operation's request schema, its query the operation's parameters, and
// each line of its answer the 200 schema or, for an error answer, the
// error schema (with a status the operation lists, when the status is
// shown). A call shown with a refused request must show an error.
// Output of a call left running (&) may come among a later call's lines.
// Every operation has at least one example.
func TestOpenAPIDocExamples(t *testing.T) {
	s := loadOpenAPI(t)
	errPtr := "#/components/schemas/ErrorBody"
	covered := map[string]int{}
	calls := 0
	var open []*specOp // operations of calls left running, in this block
	for _, b := range docBlocks(t) {
		if len(b.calls) == 0 {
			// "and the exec's answer ends:": the rest of a stream left
			// running in the block before.
			if len(open) > 0 && strings.HasPrefix(strings.TrimSpace(b.text), "{") {
				checkAnswerLines(t, s, fmt.Sprintf("%s:%d", apiDocFile, b.line+1), nil, "", open, &docCall{answer: b.text}, errPtr)
			}
			open = nil
			continue
		}
		open = nil
		for _, c := range b.calls {
			calls++
			where := fmt.Sprintf("%s:%d: %s %s", apiDocFile, c.line, c.method, c.path)
			op := s.find(c.method, c.path)
			if op != nil {
				covered[op.key()]++
			}
			status, values, raw, err := answerValues(c)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			refused := len(values) > 0 && isErrorBody(values[0]) || status >= 400
			if op == nil {
				if !refused {
					t.Errorf("%s: no operation of the spec serves this, and the answer is not an error", where)
				}
				checkAnswerLines(t, s, where, nil, "", open, c, errPtr)
				continue
			}

			// The request: the body and the query, which only a refused
			// request may get wrong.
			if c.hasBody {
				reqMedia := s.mediaTypes(op, "")
				switch {
				case len(reqMedia) == 0:
					if !refused {
						t.Errorf("%s: sends a body; %s takes none", where, op.key())
					}
				case c.rawBody:
					if !slices.Contains(reqMedia, "application/octet-stream") && !refused {
						t.Errorf("%s: sends bytes; %s takes %v", where, op.key(), reqMedia)
					}
				default:
					ptr := s.mediaSchema(op, "", "application/json")
					if ptr == "" {
						t.Errorf("%s: sends JSON; %s takes %v", where, op.key(), reqMedia)
						break
					}
					body, err := jsonschema.UnmarshalJSON(bytes.NewReader(c.body))
					if err == nil {
						err = s.validate(ptr, body)
					}
					if err != nil && !refused {
						t.Errorf("%s: the body %s does not fit the request schema, yet the answer is no error: %v", where, c.body, err)
					}
				}
			} else if s.node(op.ptr+"/requestBody/required") == true && !refused {
				t.Errorf("%s: sends no body; %s needs one", where, op.key())
			}
			params := s.queryParams(op)
			for k := range c.query {
				if _, ok := params[k]; !ok && !refused {
					t.Errorf("%s: query parameter %q is not one of %s's", where, k, op.key())
				}
			}
			for k, req := range params {
				if _, ok := c.query[k]; req && !ok && !refused {
					t.Errorf("%s: the required query parameter %q is missing", where, k)
				}
			}
			if status != 0 && status != 200 && s.node(op.ptr+"/responses/"+strconv.Itoa(status)) == nil {
				t.Errorf("%s: answered %d, which %s does not list", where, status, op.key())
			}

			// The answer.
			ptr, skip := s.answerSchema(op, c)
			switch {
			case raw && skip != "":
				// The bytes of a file.
			case raw:
				t.Errorf("%s: the answer is not JSON", where)
			case ptr == "" && skip == "":
				t.Errorf("%s: the spec has no schema for the answer through jq %s", where, c.jq)
			case skip != "" && len(values) > 0 && !isErrorBody(values[0]):
				t.Logf("%s: answer not checked: %s", where, skip)
			default:
				checkAnswerLines(t, s, where, op, ptr, open, c, errPtr)
			}
			if c.background && s.mediaSchema(op, "200", "application/x-ndjson") != "" {
				open = append(open, op)
			}
		}
	}
	if calls < 50 {
		t.Errorf("found %d curl calls in %s; the parser lost some", calls, apiDocFile)
	}
	var missing []string
	for _, op := range s.ops {
		if covered[op.key()] == 0 {
			missing = append(missing, op.key())
		}
	}
	if len(missing) > 0 {
		t.Errorf("operations without an example in %s:\n\t%s", apiDocFile, strings.Join(missing, "\n\t"))
	}
}

// checkAnswerLines validates each JSON value of a call's answer: an error
// against the error schema, anything else against ptr, or against the
// frames of a stream still open (its output shows among later calls').
func checkAnswerLines(t *testing.T, s *openAPI, where string, op *specOp, ptr string, open []*specOp, c *docCall, errPtr string) {
	t.Helper()
	_, values, raw, err := answerValues(c)
	if err != nil || raw {
		t.Errorf("%s: the answer is not JSON: %v", where, err)
		return
	}
	for i, v := range values {
		if isErrorBody(v) {
			if err := s.validate(errPtr, v); err != nil {
				t.Errorf("%s: answer %d does not fit the error schema: %v", where, i+1, err)
			}
			continue
		}
		var errs []error
		if ptr != "" {
			if err := s.validate(ptr, v); err == nil {
				continue
			} else {
				errs = append(errs, err)
			}
		}
		fits := false
		for _, o := range open {
			if s.validate(s.mediaSchema(o, "200", "application/x-ndjson"), v) == nil {
				fits = true
				break
			}
		}
		if fits {
			continue
		}
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("no schema to fit"))
		}
		what := "the 200 schema"
		if op != nil {
			what = op.key() + "'s 200 schema"
		}
		t.Errorf("%s: answer %d does not fit %s: %v", where, i+1, what, errors.Join(errs...))
	}
}
