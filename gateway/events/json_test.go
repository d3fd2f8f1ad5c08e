package events

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// jsonLine is ev as encoding/json writes it for the streams.
func jsonLine(t testing.TB, ev api.Event) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hardStrings are strings whose JSON takes care.
var hardStrings = []string{
	"", "plain", `"quoted" \back\slash`, "<a href=\"x\">&amp;</a>",
	"\x00\x01\x07\b\f\n\r\t\x1f\x7f", "é ü 日本 🦀", "\u2028 and \u2029",
	"\xff\xfe broken \xc3 utf-8 \xe2\x82", "/path/with/../dots", strings.Repeat("long ", 500),
}

// TestAppendEventIsJSON holds appendEvent to encoding/json: every field
// of api.Event set (a field added to Event and not to appendEvent fails
// here), each one alone, and every hard string in every string field.
func TestAppendEventIsJSON(t *testing.T) {
	exit := -3
	full := api.Event{Seq: 1 << 60, Time: time.Date(2026, 12, 2, 21, 0, 0, 123456789, time.UTC)}
	v := reflect.ValueOf(&full).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case !f.IsZero():
		case f.Kind() == reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case f.Kind() == reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case f.Type() == reflect.TypeOf(&exit):
			f.Set(reflect.ValueOf(&exit))
		case f.Type() == reflect.TypeOf([]string(nil)):
			f.Set(reflect.ValueOf([]string{"/a", "/b\n"}))
		default:
			t.Fatalf("field %s of type %s: teach this test (and appendEvent) about it", v.Type().Field(i).Name, f.Type())
		}
	}
	cases := []api.Event{full, {}, {Time: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}, {Paths: []string{}}}
	zero := 0
	cases = append(cases, api.Event{Exit: &zero})
	for i := range v.NumField() {
		one := api.Event{Seq: 7, Time: full.Time}
		reflect.ValueOf(&one).Elem().Field(i).Set(v.Field(i))
		cases = append(cases, one)
	}
	for _, s := range hardStrings {
		for i := range v.NumField() {
			if v.Field(i).Kind() == reflect.String {
				ev := full
				reflect.ValueOf(&ev).Elem().Field(i).SetString(s)
				cases = append(cases, ev)
			}
		}
		ev := full
		ev.Paths = []string{s, s}
		cases = append(cases, ev)
	}
	for _, ev := range cases {
		got, err := encodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if want := jsonLine(t, ev); !bytes.Equal(got, want) {
			t.Fatalf("appendEvent:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}

// FuzzAppendJSONString: any string is quoted as encoding/json quotes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range hardStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := encodeEvent(api.Event{Path: s})
		if err != nil {
			t.Fatal(err)
		}
		if want := jsonLine(t, api.Event{Path: s}); !bytes.Equal(got, want) {
			t.Fatalf("%q:\nappendEvent   %s\nencoding/json %s", s, got, want)
		}
	})
}

// TestEncodeEventTimeOutOfRange: a time JSON cannot hold is an error, as
// it is for encoding/json, not a line a reader cannot parse.
func TestEncodeEventTimeOutOfRange(t *testing.T) {
	if _, err := encodeEvent(api.Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("a time in the year 10000 was encoded")
	}
}

func BenchmarkEncodeEvent(b *testing.B) {
	ev := api.Event{Seq: 123456, Time: time.Now().UTC(), Type: api.EventFileCreated, Tenant: "default", Thread: "bench",
		Path: "/go/src/cmd/compile/internal/ssa/rewriteAMD64.go", Actor: "process 12345", Version: 3}
	b.Run("appendEvent", func(b *testing.B) {
		for b.Loop() {
			encodeEvent(ev)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			jsonLine(b, ev)
		}
	})
}
