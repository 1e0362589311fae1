-- RoCEv2 ICRC checker for tshark/Wireshark (post-dissector), used by
-- TestTshark. Independent of the Go code: it recomputes the ICRC of spec
-- rocev2.md §1.10 from the raw frame with its own CRC-32 table.
-- Lua 5.2 (tshark 4.0): bit32.* only.
--
--   tshark -X lua_script:roce_icrc.lua -r f.pcap -T fields -e roce_icrc.ok
--
-- Fields: roce_icrc.calc (computed CRC value), roce_icrc.wire (ICRC bytes
-- read little-endian), roce_icrc.ok (1 if equal).

local p = Proto("roce_icrc", "RoCEv2 ICRC check")
local f_calc = ProtoField.uint32("roce_icrc.calc", "Computed ICRC", base.HEX)
local f_wire = ProtoField.uint32("roce_icrc.wire", "Wire ICRC", base.HEX)
local f_ok = ProtoField.uint8("roce_icrc.ok", "ICRC OK")
p.fields = { f_calc, f_wire, f_ok }

local tbl = {}
for i = 0, 255 do
	local c = i
	for _ = 1, 8 do
		if bit32.band(c, 1) == 1 then
			c = bit32.bxor(0xEDB88320, bit32.rshift(c, 1))
		else
			c = bit32.rshift(c, 1)
		end
	end
	tbl[i] = c
end

function p.dissector(tvb, pinfo, tree)
	local n = tvb:len()
	if n < 14 then return end
	local ba = tvb:bytes()
	local function u16(o) return ba:get_index(o) * 256 + ba:get_index(o + 1) end
	local off = 14
	local et = u16(12)
	if et == 0x8100 then
		if n < 18 then return end
		et = u16(16)
		off = 18
	end
	local iplen, masked
	if et == 0x0800 then
		iplen = 20
		masked = { [1] = 0xFF, [8] = 0xFF, [10] = 0xFF, [11] = 0xFF }
	elseif et == 0x86dd then
		iplen = 40
		masked = { [1] = 0xFF, [2] = 0xFF, [3] = 0xFF, [7] = 0xFF }
	else
		return
	end
	local udp = off + iplen
	if n < udp + 8 + 16 then return end
	if u16(udp + 2) ~= 4791 then return end
	masked[iplen + 6] = 0xFF -- UDP checksum
	masked[iplen + 7] = 0xFF
	masked[iplen + 8 + 4] = 0xFF -- BTH byte 4
	local stop = udp + u16(udp + 4) - 4 -- offset of the ICRC
	if stop + 4 > n then return end
	local crc = 0xDEBB20E3 -- register after 8 bytes of 0xFF
	for i = off, stop - 1 do
		local rel = i - off
		local b = masked[rel] or ba:get_index(i)
		if rel == 0 and iplen == 40 then b = bit32.bor(b, 0x0F) end
		crc = bit32.bxor(tbl[bit32.band(bit32.bxor(crc, b), 0xFF)], bit32.rshift(crc, 8))
	end
	crc = bit32.bnot(crc)
	local wire = ba:get_index(stop) + ba:get_index(stop + 1) * 256 +
		ba:get_index(stop + 2) * 65536 + ba:get_index(stop + 3) * 16777216
	local t = tree:add(p, tvb(stop, 4))
	t:add(f_calc, crc)
	t:add(f_wire, wire)
	t:add(f_ok, (crc == wire) and 1 or 0)
end

register_postdissector(p)
