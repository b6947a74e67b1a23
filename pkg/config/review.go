package config

import (
	"errors"
	"slices"
)

// Review is what trusting the project file would accept: every setting of it that loosens the
// sandbox, for the project's default sandbox and for each of its sandboxes: sections.
type Review struct {
	Trust Trust `json:"trust"`
	// Loosenings are in the file's order of keys; Sandbox is "" for what every sandbox gets.
	Loosenings []ReviewItem `json:"loosenings"`
	// Problems are refused whether or not the file is trusted.
	Problems []Problem `json:"-"`
}

// ReviewItem is one loosening and the sandbox it applies to ("" for all of them).
type ReviewItem struct {
	Sandbox string `json:"sandbox,omitempty"`
	Loosening
}

// ReviewProject resolves the project of in once for its default sandbox and once per section,
// and lists what the project file loosens in each. in.Name is ignored.
func ReviewProject(in Inputs) (*Review, error) {
	in.Name = ""
	r, err := Resolve(in)
	var verr *ValidationError
	if r == nil || (err != nil && !errors.As(err, &verr)) {
		return nil, err
	}
	rev := &Review{Trust: r.Trust, Loosenings: []ReviewItem{}}
	rev.Trust.Files = nil
	add := func(sandbox string, res *Resolved) {
		// Each sandbox may point to files of its own: trusting takes all of them.
		for _, f := range res.Trust.Files {
			if !slices.Contains(rev.Trust.Files, f) {
				rev.Trust.Files = append(rev.Trust.Files, f)
			}
		}
		for _, l := range res.Loosenings {
			if !slices.ContainsFunc(rev.Loosenings, func(i ReviewItem) bool { return i.Loosening == l }) {
				rev.Loosenings = append(rev.Loosenings, ReviewItem{Sandbox: sandbox, Loosening: l})
			}
		}
		for _, p := range res.Problems {
			if !p.Untrusted && !slices.Contains(rev.Problems, p) {
				rev.Problems = append(rev.Problems, p)
			}
		}
	}
	add("", r)
	for _, name := range r.ProjectSections() {
		in.Name = name
		res, err := Resolve(in)
		if res == nil {
			return nil, err
		}
		add(name, res)
	}
	return rev, nil
}
