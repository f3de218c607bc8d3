package store

// ListConditions runs listConditions for the external tests, which need
// the real stores' dialects (store/postgres and store/sqlite import this
// package, so only an external test package may import them): the
// conditions of p in d and every parameter bound, the clock (nil) first.
func ListConditions(d ListDialect, p ListParams) ([]string, []any) {
	a := &Args{placeholder: d.Placeholder}
	a.Add(nil)
	return listConditions(d, a, p), a.Values
}
