// Command shedcompare compares overload shedders on a CPU-bound server:
// no shedding, rampart's shed, go-zero's core/load adaptive shedder and
// Kratos's aegis ratelimit/bbr. The handler burns a fixed amount of CPU;
// arrivals are open-loop at a multiple of the capacity measured on this
// machine (default 2×) after a warm-up at half of it. It prints, for each
// shedder, the latency (p50, p99, p99 of the second half), the goodput
// against the capacity and the share shed, as a Markdown table, and writes
// the table to -out when given.
//
//	go run . -duration 4s -out results.md
//
// The figures depend on the machine and on what else runs on it: on a
// shared machine, rerun and compare the rows of one run with each other.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rampart-go/rampart/shed"
)

func main() {
	var c config
	flag.DurationVar(&c.work, "work", 2*time.Millisecond, "the handler's CPU time on an idle core")
	flag.DurationVar(&c.chunk, "chunk", 100*time.Microsecond, "the handler yields (runtime.Gosched) after each chunk of this much CPU")
	flag.Float64Var(&c.load, "load", 2, "offered load during the measured phase, as a multiple of the measured capacity")
	flag.DurationVar(&c.warmup, "warmup", time.Second, "the warm-up at half the capacity before the measured phase")
	flag.DurationVar(&c.duration, "duration", 4*time.Second, "the measured phase")
	flag.DurationVar(&c.measure, "capacity", time.Second, "the closed-loop capacity measurement before each row")
	ignoreCPU := flag.Bool("ignore-cpu", false, "rampart ignores the runtime's CPU signal (shed.Config.Ignore: shed.CPU)")
	flag.DurationVar(&c.sample, "sample", 0, "also run rampart with this SampleInterval (a second row)")
	flag.StringVar(&c.only, "only", "", "run only the shedders whose row name contains this")
	out := flag.String("out", "", "also write the table to this file")
	flag.Parse()
	if *ignoreCPU {
		c.ignore = shed.CPU
	}
	var buf bytes.Buffer
	if _, err := compare(c, &buf, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Stdout.Write(buf.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
