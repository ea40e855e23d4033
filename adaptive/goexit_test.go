package adaptive

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
