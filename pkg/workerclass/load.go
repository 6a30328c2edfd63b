package workerclass

// desiredWorkers is ceil(requested / (capacity × targetUtilization / 100)).
func desiredWorkers(requested, capacity int64, targetUtilization int32) int32 {
	if requested <= 0 || capacity <= 0 {
		return 0
	}
	per := capacity * int64(targetUtilization) // per worker, in hundredths
	return int32((requested*100 + per - 1) / per)
}
