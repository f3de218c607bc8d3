// Command pgping exits 0 when the PostgreSQL server at the URL answers
// (scripts/test.sh uses it to find a test server without needing psql).
// With -create NAME it creates that database if it does not exist.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	create := flag.String("create", "", "create this database if missing")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: pgping [-create NAME] URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgping:", err)
		os.Exit(1)
	}
	defer conn.Close(ctx)
	if *create != "" {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", *create).Scan(&exists); err != nil {
			fmt.Fprintln(os.Stderr, "pgping:", err)
			os.Exit(1)
		}
		if !exists {
			if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{*create}.Sanitize()); err != nil {
				fmt.Fprintln(os.Stderr, "pgping:", err)
				os.Exit(1)
			}
		}
	}
}
