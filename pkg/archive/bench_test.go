package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func BenchmarkExtract(b *testing.B) {
	b.Run("2000 files", func(b *testing.B) {
		ents := []ent{dir("base/")}
		body := string(bytes.Repeat([]byte("0123456789abcdef"), 64)) // 1 KiB
		for d := range 20 {
			ents = append(ents, dir(fmt.Sprintf("base/d%02d/", d)))
			for f := range 100 {
				ents = append(ents, file(fmt.Sprintf("base/d%02d/f%03d", d, f), body))
			}
		}
		benchExtract(b, tarOf(b, ents...))
	})
	b.Run("100 MiB file", func(b *testing.B) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		const size = 100 << 20
		if err := tw.WriteHeader(&tar.Header{Name: "base", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			b.Fatal(err)
		}
		chunk := bytes.Repeat([]byte("sbx cp benchmark"), 4096)
		for n := 0; n < size; n += len(chunk) {
			tw.Write(chunk[:min(len(chunk), size-n)])
		}
		tw.Close()
		benchExtract(b, buf.Bytes())
	})
}

func benchExtract(b *testing.B, archive []byte) {
	work := b.TempDir()
	b.SetBytes(int64(len(archive)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		dst := filepath.Join(work, strconv.Itoa(i))
		if _, err := Extract(context.Background(), bytes.NewReader(archive), dst, ExtractOptions{Base: "base"}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}
