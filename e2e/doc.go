// Package e2e holds tests that run real gpumesh processes and in-process
// meshes, including the chaos suite. It has no code of its own outside tests.
package e2e
