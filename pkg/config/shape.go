package config

import "strings"

// The names and numbers every resolve checks are matched by hand, not by regular expressions:
// compiling those at every start cost a warm exec about half a millisecond. Each matcher
// says the expression it stands for, and TestMatchersAgreeWithTheirExpressions holds them to it.

// namePattern is a sandbox name's shape, as the config schema gives it.
const namePattern = `^[a-z0-9][a-z0-9_.-]{0,62}$`

func isDigit(b byte) bool { return '0' <= b && b <= '9' }
func isLower(b byte) bool { return 'a' <= b && b <= 'z' }
func isAlpha(b byte) bool { return isLower(b) || 'A' <= b && b <= 'Z' }

// shaped reports whether s is one byte that first accepts, then only bytes that rest
// accepts, and at most max bytes long (0: any length).
func shaped(s string, max int, first, rest func(byte) bool) bool {
	if s == "" || max > 0 && len(s) > max || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

// isName: namePattern.
func isName(s string) bool {
	lowerDigit := func(b byte) bool { return isLower(b) || isDigit(b) }
	return shaped(s, 63, lowerDigit, func(b byte) bool { return lowerDigit(b) || b == '_' || b == '.' || b == '-' })
}

// isNumeric: ^[0-9]+$.
func isNumeric(s string) bool { return shaped(s, 0, isDigit, isDigit) }

// isEnvName: ^[A-Za-z_][A-Za-z0-9_]*$.
func isEnvName(s string) bool {
	return shaped(s, 0, func(b byte) bool { return isAlpha(b) || b == '_' },
		func(b byte) bool { return isAlpha(b) || isDigit(b) || b == '_' })
}

// isNetName: ^[A-Za-z0-9][A-Za-z0-9_.-]*$.
func isNetName(s string) bool {
	alnum := func(b byte) bool { return isAlpha(b) || isDigit(b) }
	return shaped(s, 0, alnum, func(b byte) bool { return alnum(b) || b == '_' || b == '.' || b == '-' })
}

// sizeParts splits a size (?i)^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b)?$ into its number
// and its unit, lower-cased.
func sizeParts(s string) (number, unit string, ok bool) {
	digits := func(i int) int {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		return i
	}
	i := digits(0)
	if i == 0 {
		return "", "", false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return "", "", false
		}
		i = j
	}
	number = s[:i]
	for i < len(s) && strings.IndexByte("\t\n\f\r ", s[i]) >= 0 {
		i++
	}
	if i < len(s) && strings.IndexByte("kmgtKMGT", s[i]) >= 0 {
		unit = strings.ToLower(s[i : i+1])
		i++
	}
	switch strings.ToLower(s[i:]) {
	case "", "b", "ib":
		return number, unit, true
	}
	return "", "", false
}
