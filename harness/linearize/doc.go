// Package linearize checks that the journal's per-key protocol is
// linearizable: concurrent clients issue random commands on a few
// operation keys over gRPC and REST against a real journal, every call is
// recorded with its call and return time, and porcupine searches for a
// sequential order of the calls, consistent with real time, in which the
// protocol's independent model (protocol/model) gives every answer the
// journal gave.
//
// It checks budgets the same way (RunBudget): agents racing to register
// operations that charge one budget, on several journal processes over
// one database, replaying keys and failing admitted operations for good,
// against the budget counter's model (model.BudgetModel), which spans
// every key of the budget.
package linearize
